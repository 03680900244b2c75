package service

import (
	"encoding/json"
	"net"
	"net/url"
	"strings"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// The bounds on reasoning, prompt caching and media that hold whatever the
// route.
const (
	// maxThinkingBudget bounds reasoning.budget_tokens (routes bound it
	// lower, with max_thinking_budget).
	maxThinkingBudget = 1_000_000
	// maxCacheBreakpoints is how many cache breakpoints a request may mark
	// (Anthropic's limit).
	maxCacheBreakpoints = 4
	// maxMediaURLBytes bounds an image's or a document's URL.
	maxMediaURLBytes = 2048
	// maxDocumentTitleBytes bounds a document's title.
	maxDocumentTitleBytes = 256
)

// needs is what a request asks of every route of its chain beyond its
// parameters: found in one walk of its messages and tools.
type needs struct {
	imageURL   bool // an image given by URL
	documents  bool // a document block
	cacheMarks int  // the caller's cache breakpoints: blocks, tools and the system's
}

func needsOf(req *completionv1.CompleteRequest) needs {
	var n needs
	for _, m := range req.GetMessages() {
		for _, b := range m.GetContent() {
			if b.GetCacheBreakpoint() {
				n.cacheMarks++
			}
			switch blk := b.GetBlock().(type) {
			case *completionv1.ContentBlock_Image:
				n.imageURL = n.imageURL || blk.Image.GetUrl() != ""
			case *completionv1.ContentBlock_Document:
				n.documents = true
			}
		}
	}
	for _, t := range req.GetTools() {
		if t.GetCacheBreakpoint() {
			n.cacheMarks++
		}
	}
	if req.GetPromptCache().GetSystem() {
		n.cacheMarks++
	}
	return n
}

func validateReasoning(r *completionv1.Reasoning, v *violations) {
	if r == nil {
		return
	}
	if b := r.GetBudgetTokens(); b != 0 && (b < config.MinThinkingBudget || b > maxThinkingBudget) {
		v.add("reasoning.budget_tokens", "must be 0 or between %d and %d, got %d", config.MinThinkingBudget, maxThinkingBudget, b)
	}
	if _, ok := completionv1.ReasoningEffort_name[int32(r.GetEffort())]; !ok {
		v.add("reasoning.effort", "unknown reasoning effort %d", r.GetEffort())
	}
}

func validatePromptCache(pc *completionv1.PromptCache, marks int, v *violations) {
	mode := pc.GetMode()
	if _, ok := completionv1.PromptCacheMode_name[int32(mode)]; !ok {
		v.add("prompt_cache.mode", "unknown prompt cache mode %d", mode)
		return
	}
	switch {
	case mode == completionv1.PromptCacheMode_PROMPT_CACHE_MODE_OFF && marks > 0:
		v.add("prompt_cache.mode", "PROMPT_CACHE_MODE_OFF with %d cache breakpoints marked: unmark them, or use AUTO or CALLER", marks)
	case marks > maxCacheBreakpoints:
		v.add("prompt_cache", "%d cache breakpoints marked (blocks, tools and the system), over the limit of %d", marks, maxCacheBreakpoints)
	}
}

// checkRouteNeeds adds a violation for each thing req asks that the route
// cannot do: reasoning within its ceilings, media by URL, documents,
// cache marks, structured output by a forced tool.
func checkRouteNeeds(req *completionv1.CompleteRequest, need needs, route string, capa config.Capabilities, v *violations) {
	on := "route " + quote(route)
	checkRouteReasoning(req.GetReasoning(), on, capa, v)
	if need.imageURL && !capa.ImageURL {
		v.add("messages", "%s does not take images by URL", on)
	}
	if need.documents && !capa.Documents {
		v.add("messages", "%s does not take documents", on)
	}
	if need.cacheMarks > 0 && !capa.CacheBreakpoints {
		v.add("prompt_cache", "%s takes no cache breakpoints", on)
	}
	if req.GetOutputJsonSchema() != "" && capa.StructuredOutput == config.StructuredByTool {
		checkStructuredTool(req, on, capa, v)
	}
}

func checkRouteReasoning(r *completionv1.Reasoning, on string, capa config.Capabilities, v *violations) {
	if !reasoningAsked(r) {
		return
	}
	if !capa.Reasons() {
		v.add("reasoning", "%s does not reason (its configuration sets neither max_thinking_budget nor max_reasoning_effort)", on)
		return
	}
	if b := int(r.GetBudgetTokens()); b >= config.MinThinkingBudget && capa.ThinkingBudget && b > capa.MaxThinkingBudget {
		v.add("reasoning.budget_tokens", "%s thinks with at most %d tokens, got %d", on, capa.MaxThinkingBudget, b)
	}
	if e := effortName(r.GetEffort()); e != "" && capa.ReasoningEffort && config.EffortRank(e) > config.EffortRank(capa.MaxReasoningEffort) {
		v.add("reasoning.effort", "%s reasons with at most %s effort, got %s", on, quote(capa.MaxReasoningEffort), quote(e))
	}
	if r.GetInterleaved() && !capa.InterleavedThinking {
		v.add("reasoning.interleaved", "%s cannot think between tool calls", on)
	}
}

// checkStructuredTool checks a request on a route that answers an output
// schema through a forced tool: the tool choice is completiond's, the
// model cannot think while forced, and a tool's input is an object.
func checkStructuredTool(req *completionv1.CompleteRequest, on string, capa config.Capabilities, v *violations) {
	if m := req.GetToolChoice().GetMode(); m != completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_UNSPECIFIED && m != completionv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO {
		v.add("tool_choice.mode", "%s answers output_json_schema through a forced tool: it takes no tool_choice", on)
	}
	if !capa.ToolChoiceTool { // a thinking route cannot be forced
		v.add("output_json_schema", "%s answers output_json_schema through a forced tool, which a thinking model cannot be made to call", on)
	}
	var root struct {
		Type any `json:"type"`
	}
	if json.Unmarshal([]byte(req.GetOutputJsonSchema()), &root) == nil && root.Type != "object" {
		v.add("output_json_schema", "%s answers through a tool, whose input must be an object: the schema's type must be \"object\"", on)
	}
	for _, t := range req.GetTools() {
		if t.GetName() == config.StructuredToolName {
			v.add("tools", "%s answers through a tool of its own named %s: rename the request's", on, quote(config.StructuredToolName))
		}
	}
}

// validateMediaURL checks the URL of an image or a document: https, short,
// with a host, no credentials, and not an address that is private on any
// network (the provider fetches it, never completiond; an OpenAI-compatible
// server on the operator's network must not be made to fetch from it).
func validateMediaURL(field, raw string, v *violations) {
	if len(raw) > maxMediaURLBytes {
		v.add(field, "%d bytes, over the limit of %d", len(raw), maxMediaURLBytes)
		return
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		v.add(field, "not a URL")
	case u.Scheme != "https":
		v.add(field, "the scheme must be https, got %s", quote(clip(u.Scheme, 16)))
	case u.Host == "" || u.Hostname() == "":
		v.add(field, "the URL has no host")
	case u.User != nil:
		v.add(field, "the URL must not carry credentials")
	case internalHost(u.Hostname()):
		v.add(field, "the host %s is a local or private address", quote(clip(u.Hostname(), 64)))
	}
}

// internalHost reports whether host names this machine or a private,
// link-local or unspecified address. Names are not resolved: a name is
// judged by its form only (localhost and its subdomains, .local,
// .internal).
func internalHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") || strings.HasSuffix(h, ".local") || strings.HasSuffix(h, ".internal") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && (ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsUnspecified() || ip.IsInterfaceLocalMulticast() || ip.IsMulticast())
}

// maxThinkingModelBytes bounds the model named by a thinking block.
const maxThinkingModelBytes = 256

// validateThinking checks a thinking block a caller sends back: the
// reasoning with its signature, or the redacted data alone.
func validateThinking(field string, th *completionv1.ThinkingBlock, v *violations) {
	redacted := len(th.GetRedactedData()) > 0
	switch {
	case redacted && (th.GetThinking() != "" || th.GetSignature() != ""):
		v.add(field, "a thinking block is thinking with its signature, or redacted_data alone")
	case !redacted && (th.GetThinking() == "" || th.GetSignature() == ""):
		v.add(field, "thinking and its signature are required (or redacted_data)")
	}
	if len(th.GetModel()) > maxThinkingModelBytes {
		v.add(field+".model", "%d bytes, over the limit of %d", len(th.GetModel()), maxThinkingModelBytes)
	}
}

func (c *Config) validateDocument(field string, d *completionv1.DocumentBlock, v *violations) {
	if len(d.GetTitle()) > maxDocumentTitleBytes {
		v.add(field+".title", "%d bytes, over the limit of %d", len(d.GetTitle()), maxDocumentTitleBytes)
	}
	if d.GetUrl() != "" {
		if len(d.GetData()) > 0 || d.GetMediaType() != "" {
			v.add(field, "a document is data with its media_type, or a url alone")
		}
		validateMediaURL(field+".url", d.GetUrl(), v)
		return
	}
	if d.GetMediaType() != "application/pdf" {
		v.add(field+".media_type", "media type %s is not application/pdf", quote(clip(d.GetMediaType(), 64)))
	}
	switch data := d.GetData(); {
	case len(data) == 0:
		v.add(field+".data", "document data (or a url) is required")
	case !strings.HasPrefix(string(data[:min(len(data), 5)]), "%PDF-"):
		v.add(field+".data", "not a PDF: it does not start with %%PDF-")
	}
}
