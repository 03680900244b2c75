package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider/sim"
)

// violations collects the field violations of one request. Only the first
// maxViolations are kept; each one after them is counted by a moreViolations
// entry, which invalidArgument turns into one last violation saying how many
// were left out. A request of 200 000 empty blocks thus costs one pointer per
// block, not a formatted violation, and its status stays small.
type violations []*errdetails.BadRequest_FieldViolation

// The bounds on what a refusal says.
const (
	// maxViolations is how many field violations a refusal lists.
	maxViolations = 20
	// maxEcho bounds a caller's value quoted in a description: a longer one
	// is cut to this many bytes and its length is given.
	maxEcho = 64
	// maxField and maxDescription bound the two strings of a violation.
	maxField, maxDescription = 128, 512
)

// moreViolations stands for a violation past the first maxViolations; it is
// never sent.
var moreViolations = &errdetails.BadRequest_FieldViolation{Field: "more"}

func (v *violations) add(field, format string, args ...any) {
	if len(*v) >= maxViolations {
		*v = append(*v, moreViolations)
		return
	}
	*v = append(*v, &errdetails.BadRequest_FieldViolation{Field: clip(field, maxField), Description: clip(fmt.Sprintf(format, args...), maxDescription)})
}

// quote is a caller's value as a description shows it: quoted, and cut to
// maxEcho bytes with its length when it is longer.
func quote(s string) string {
	if len(s) <= maxEcho {
		return strconv.Quote(s)
	}
	return strconv.Quote(cutRunes(s, maxEcho)) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// clip bounds s to about n bytes of valid UTF-8, marking a cut with "…".
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	return cutRunes(s, n) + "…"
}

// cutRunes is the longest prefix of s of at most n bytes that does not
// split a rune.
func cutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

var (
	toolNamePattern   = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	imageMediaTypes   = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}
	maxMetadataKeyLen = 128
	maxMetadataValLen = 4096
)

// validate checks req against the configuration before anything is called.
// It returns every violation it finds, and the compiled output schema.
func (c *Config) validate(req *completionv1.CompleteRequest) (violations, *jsonschema.Schema) {
	return c.validateAs(req, nil)
}

// validateFor is validate for the caller of ctx: an unknown route's
// violation lists only the routes its key may use, not every route the
// server has.
func (c *Config) validateFor(ctx context.Context, req *completionv1.CompleteRequest) (violations, *jsonschema.Schema) {
	if caller, ok := callerFrom(ctx); ok && caller.Routes != nil {
		return c.validateAs(req, caller.may)
	}
	return c.validateAs(req, nil)
}

// validateAs is validate, where an unknown route's violation lists the
// routes may allows (every one when may is nil).
func (c *Config) validateAs(req *completionv1.CompleteRequest, may func(string) bool) (violations, *jsonschema.Schema) {
	var v violations
	if why, ok := malformed(req); ok {
		v.add("request", "not a valid completion.v1.CompleteRequest: %s", why)
		return v, nil
	}
	checkIdempotencyKey(req.GetIdempotencyKey(), &v) // before the size, which a huge key would be blamed for
	if n := proto.Size(req); n > c.Limits.MaxRequestBytes {
		v.add("messages", "request is %d bytes, over the limit of %d", n, c.Limits.MaxRequestBytes)
		return v, nil // do not walk an oversized request
	}
	c.validateRoutes(req, may, &v)
	c.validateMessages(req.GetMessages(), &v)
	c.validateTools(req.GetTools(), &v)
	c.validateNumbers(req, &v)
	c.validateParameters(req, &v)
	c.validateMetadata(req, &v)
	if _, ok := completionv1.DeliveryMode_name[int32(req.GetDelivery())]; !ok {
		v.add("delivery", "unknown delivery mode %d", req.GetDelivery())
	}
	_, pv := c.tighten(req.GetPolicy(), 0)
	v = append(v, pv...)
	schema := compileSchema(req.GetOutputJsonSchema(), &v)
	return v, schema
}

func (c *Config) validateRoutes(req *completionv1.CompleteRequest, may func(string) bool, v *violations) {
	if r := req.GetRoute(); r != "" {
		if _, ok := c.Routes[r]; !ok {
			v.add("route", "unknown route %s (%s)", quote(r), c.routesShown(may))
		}
	}
	for i, r := range req.GetFallbackRoutes() {
		if _, ok := c.Routes[r]; !ok {
			v.add(fmt.Sprintf("fallback_routes[%d]", i), "unknown route %s", quote(r))
		}
	}
}

func (c *Config) validateMessages(msgs []*completionv1.Message, v *violations) {
	if len(msgs) == 0 {
		v.add("messages", "at least one message is required")
		return
	}
	if len(msgs) > c.Limits.MaxMessages {
		v.add("messages", "%d messages, over the limit of %d", len(msgs), c.Limits.MaxMessages)
		return
	}
	if msgs[0].GetRole() != completionv1.Role_ROLE_USER {
		v.add("messages[0].role", "the first message must be from the user")
	}
	// A field's name is formatted only for a violation: a valid request,
	// the common one, formats none (two per block were a good part of what
	// validating a short request cost).
	for i, m := range msgs {
		role := m.GetRole()
		if role != completionv1.Role_ROLE_USER && role != completionv1.Role_ROLE_ASSISTANT {
			v.add(messageField(i)+".role", "role must be ROLE_USER or ROLE_ASSISTANT, got %v", role)
		}
		if len(m.GetContent()) == 0 {
			v.add(messageField(i)+".content", "content must not be empty")
		}
		for j, b := range m.GetContent() {
			if !validBlock(b) {
				c.validateBlock(messageField(i)+".content["+strconv.Itoa(j)+"]", role, b, v)
			}
		}
	}
}

// messageField is the name of message i's field.
func messageField(i int) string { return "messages[" + strconv.Itoa(i) + "]" }

// validBlock reports whether b is a text block that validateBlock would
// find nothing wrong with: the common block, told without its field's name.
// The others go through validateBlock.
func validBlock(b *completionv1.ContentBlock) bool {
	t, ok := b.GetBlock().(*completionv1.ContentBlock_Text)
	return ok && strings.TrimSpace(t.Text.GetText()) != ""
}

func (c *Config) validateBlock(field string, role completionv1.Role, b *completionv1.ContentBlock, v *violations) {
	user, assistant := role == completionv1.Role_ROLE_USER, role == completionv1.Role_ROLE_ASSISTANT
	switch blk := b.GetBlock().(type) {
	case *completionv1.ContentBlock_Text:
		if strings.TrimSpace(blk.Text.GetText()) == "" {
			v.add(field+".text.text", "text must not be empty")
		}
	case *completionv1.ContentBlock_Image:
		c.validateImage(field+".image", blk.Image, v)
		if !user {
			v.add(field+".image", "images are allowed in user messages only")
		}
	case *completionv1.ContentBlock_Document:
		c.validateDocument(field+".document", blk.Document, v)
		if !user {
			v.add(field+".document", "documents are allowed in user messages only")
		}
	case *completionv1.ContentBlock_Thinking:
		validateThinking(field+".thinking", blk.Thinking, v)
		if !assistant {
			v.add(field+".thinking", "thinking is allowed in assistant messages only")
		}
	case *completionv1.ContentBlock_ToolUse:
		if blk.ToolUse.GetId() == "" {
			v.add(field+".tool_use.id", "id must not be empty")
		}
		if !toolNamePattern.MatchString(blk.ToolUse.GetName()) {
			v.add(field+".tool_use.name", "name must match %s", toolNamePattern)
		}
		if !assistant {
			v.add(field+".tool_use", "tool calls are allowed in assistant messages only")
		}
	case *completionv1.ContentBlock_ToolResult:
		if blk.ToolResult.GetToolUseId() == "" {
			v.add(field+".tool_result.tool_use_id", "tool_use_id must not be empty")
		}
		if !user {
			v.add(field+".tool_result", "tool results are allowed in user messages only")
		}
	default:
		v.add(field, "block must be one of text, image, document, thinking, tool_use, tool_result")
	}
}

func (c *Config) validateImage(field string, img *completionv1.ImageBlock, v *violations) {
	if img.GetUrl() != "" {
		if len(img.GetData()) > 0 || img.GetMediaType() != "" {
			v.add(field, "an image is data with its media_type, or a url alone")
		}
		validateMediaURL(field+".url", img.GetUrl(), v)
		return
	}
	if !imageMediaTypes[img.GetMediaType()] {
		v.add(field+".media_type", "media type %s is not one of image/png, image/jpeg, image/gif, image/webp", quote(img.GetMediaType()))
	}
	switch n := len(img.GetData()); {
	case n == 0:
		v.add(field+".data", "image data (or a url) is required")
	case n > c.Limits.MaxImageBytes:
		v.add(field+".data", "image is %d bytes, over the limit of %d", n, c.Limits.MaxImageBytes)
	}
}

func (c *Config) validateTools(tools []*completionv1.Tool, v *violations) {
	if len(tools) > c.Limits.MaxTools {
		v.add("tools", "%d tools, over the limit of %d", len(tools), c.Limits.MaxTools)
		return
	}
	seen := map[string]bool{}
	for i, t := range tools {
		field := fmt.Sprintf("tools[%d]", i)
		if !toolNamePattern.MatchString(t.GetName()) {
			v.add(field+".name", "name must match %s", toolNamePattern)
		}
		if seen[t.GetName()] {
			v.add(field+".name", "duplicate tool name %s", quote(t.GetName()))
		}
		seen[t.GetName()] = true
		if t.GetInputSchema() == nil {
			continue
		}
		raw, err := t.GetInputSchema().MarshalJSON()
		if err == nil {
			compileSchemaJSON(raw, field+".input_schema", v)
		}
	}
}

func (c *Config) validateNumbers(req *completionv1.CompleteRequest, v *violations) {
	if req.MaxOutputTokens != nil {
		if n := req.GetMaxOutputTokens(); n <= 0 || int(n) > c.Limits.MaxOutputTokens {
			v.add("max_output_tokens", "must be between 1 and %d, got %d", c.Limits.MaxOutputTokens, n)
		}
	}
	if n := req.GetTokenBudget(); n < 0 || n > 10_000_000 {
		v.add("token_budget", "must be between 0 and 10000000, got %d", n)
	}
	if g := req.GetResumeGrace(); g != nil {
		if err := g.CheckValid(); err != nil {
			v.add("resume_grace", "not a valid duration: %v", err)
		} else if d := g.AsDuration(); d < 0 || d > c.MaxResumeGrace {
			v.add("resume_grace", "must be between 0s and %s, got %s", c.MaxResumeGrace, d)
		}
	}
}

func (c *Config) validateMetadata(req *completionv1.CompleteRequest, v *violations) {
	md := req.GetMetadata()
	if len(md) > c.Limits.MaxMetadata {
		v.add("metadata", "%d entries, over the limit of %d", len(md), c.Limits.MaxMetadata)
	}
	for k, val := range md {
		if len(k) == 0 || len(k) > maxMetadataKeyLen || len(val) > maxMetadataValLen {
			v.add(fmt.Sprintf("metadata[%s]", truncateKey(k)), "keys must be 1..%d bytes and values at most %d", maxMetadataKeyLen, maxMetadataValLen)
		}
	}
	if s, ok := md[sim.MetaFaults]; ok {
		if _, err := sim.ParseScript(s); err != nil {
			v.add("metadata["+sim.MetaFaults+"]", "%v", err)
		}
	}
}

func truncateKey(k string) string {
	if len(k) > 32 {
		return cutRunes(k, 32) + "…"
	}
	return k
}

// compileSchema compiles the request's output JSON Schema, if it has one.
func compileSchema(src string, v *violations) *jsonschema.Schema {
	if strings.TrimSpace(src) == "" {
		return nil
	}
	return compileSchemaJSON([]byte(src), "output_json_schema", v)
}

func compileSchemaJSON(src []byte, field string, v *violations) *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(src))
	if err != nil {
		v.add(field, "not valid JSON: %v", err)
		return nil
	}
	if _, ok := doc.(map[string]any); !ok {
		if _, isBool := doc.(bool); !isBool {
			v.add(field, "a JSON Schema must be an object or a boolean")
			return nil
		}
	}
	c := jsonschema.NewCompiler()
	// The library's default loader reads file:// URLs from the server's disk;
	// a schema may refer only to itself. The draft metaschemas named by
	// $schema are embedded in the library and never reach a loader.
	c.UseLoader(refuseLoader{})
	const url = "request://schema.json"
	if err := c.AddResource(url, doc); err != nil {
		v.add(field, "invalid JSON Schema: %v", err)
		return nil
	}
	s, err := c.Compile(url)
	var external *jsonschema.LoadURLError
	switch {
	case errors.As(err, &external):
		v.add(field, "the schema refers to %s outside itself: only references within the schema (such as \"#/$defs/x\") are allowed", quote(external.URL))
		return nil
	case err != nil:
		v.add(field, "invalid JSON Schema: %v", err)
		return nil
	}
	return s
}

// errExternalRef is what refuseLoader answers for every URL.
var errExternalRef = errors.New("references outside the request's schema are not loaded")

// refuseLoader is the URL loader of every schema a request brings: it loads
// nothing, so that a $ref or $schema can neither read the server's files nor
// make it call a URL.
type refuseLoader struct{}

// Load refuses url.
func (refuseLoader) Load(string) (any, error) { return nil, errExternalRef }

func (c *Config) routeNames() []string { return config.SortedKeys(c.Routes) }

// maxRoutesShown bounds the routes an unknown route's violation lists.
const maxRoutesShown = 16

// routesShown lists, for an unknown route's violation, the routes may
// allows (every one when may is nil), at most maxRoutesShown of them.
func (c *Config) routesShown(may func(string) bool) string {
	var names []string
	more := 0
	for _, n := range c.routeNames() {
		switch {
		case may != nil && !may(n):
		case len(names) == maxRoutesShown:
			more++
		default:
			names = append(names, n)
		}
	}
	label := "configured: "
	if may != nil {
		label = "routes your key may use: "
	}
	if len(names) == 0 {
		return label + "none"
	}
	if more > 0 {
		names = append(names, fmt.Sprintf("and %d more", more))
	}
	return label + strings.Join(names, ", ")
}
