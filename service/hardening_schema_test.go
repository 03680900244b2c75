package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/structpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/provider/sim"
)

// schemaCanary is the content of a file on the server's disk that a schema
// refers to: it must never reach the caller.
const schemaCanary = "CANARY-server-file-3f9a1c"

// TestSchemasLoadNothingFromOutsideTheRequest refers from an output schema
// and from a tool's input schema to the server's files (an existing JSON file
// with recognisable content, a missing one, the server's own stdin), to an
// http URL, and names such a URL as $schema: each request is refused at once
// with INVALID_ARGUMENT naming the field, the same way whether the file exists
// or not, and the file's content appears nowhere in what the caller sees.
func TestSchemasLoadNothingFromOutsideTheRequest(t *testing.T) {
	dir := t.TempDir()
	canary := filepath.Join(dir, "canary.json")
	if err := os.WriteFile(canary, []byte(`{"const": "`+schemaCanary+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t)
	tests := []struct {
		name   string
		schema string
		// where is the path the error names, when it is not the file's URL.
		where string
	}{
		{"file ref to an existing file", `{"$ref": "file://` + canary + `"}`, ""},
		{"file ref to a missing file", `{"$ref": "file://` + filepath.Join(dir, "missing.json") + `"}`, ""},
		{"file ref to the server's stdin", `{"$ref": "file:///proc/self/fd/0"}`, ""},
		{"nested file ref", `{"type": "object", "properties": {"a": {"$ref": "file://` + canary + `#/const"}}}`, ""},
		{"relative ref against a file base", `{"$id": "file://` + dir + `/", "$ref": "canary.json"}`, ""},
		{"http ref", `{"$ref": "http://127.0.0.1:9/schema.json"}`, ""},
		{"https ref", `{"$ref": "https://example.com/schema.json"}`, ""},
		{"file metaschema", `{"$schema": "file://` + canary + `", "type": "object"}`, ""},
		{"http metaschema", `{"$schema": "http://127.0.0.1:9/meta.json", "type": "object"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			withOutput := prompt("hello", map[string]string{sim.MetaReply: `{"a": 1}`})
			withOutput.OutputJsonSchema = tt.schema
			var in structpb.Struct
			if err := in.UnmarshalJSON([]byte(tt.schema)); err != nil {
				t.Fatal(err)
			}
			withTool := prompt("hello", nil)
			withTool.Tools = []*completionv1.Tool{{Name: "ok"}, {Name: "reader", InputSchema: &in}}

			for _, c := range []struct {
				req   *completionv1.CompleteRequest
				field string
			}{{withOutput, "output_json_schema"}, {withTool, "tools[1].input_schema"}} {
				for _, rpc := range []string{"Stream", "Complete"} {
					st, seen := callBounded(t, env, rpc, c.req)
					if st.Code() != codes.InvalidArgument || !hasViolation(st.Details(), c.field) {
						t.Fatalf("%s with %s: status %v %q, want INVALID_ARGUMENT naming %s", rpc, c.field, st.Code(), st.Message(), c.field)
					}
					if strings.Contains(seen, schemaCanary) {
						t.Errorf("%s: the server's file reached the caller:\n%s", rpc, seen)
					}
					if !strings.Contains(st.Message(), "outside itself") {
						t.Errorf("%s: message %q does not say the reference is external", rpc, st.Message())
					}
				}
			}
		})
	}
	if n := env.upstream.calls.Load(); n != 0 {
		t.Errorf("the upstream was called %d times", n)
	}
}

// TestSchemaRefusalDoesNotTellWhetherAFileExists compares the refusals of a
// reference to an existing file and to a missing one: they differ only by
// the path.
func TestSchemaRefusalDoesNotTellWhetherAFileExists(t *testing.T) {
	dir := t.TempDir()
	exists, missing := filepath.Join(dir, "aaaa.json"), filepath.Join(dir, "bbbb.json")
	if err := os.WriteFile(exists, []byte(`{"type": "string"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t)
	var msgs []string
	for _, path := range []string{exists, missing} {
		req := prompt("hello", nil)
		req.OutputJsonSchema = `{"$ref": "file://` + path + `"}`
		st, _ := callBounded(t, env, "Complete", req)
		msgs = append(msgs, strings.ReplaceAll(prototext.Format(st.Proto()), filepath.Base(path), "X.json"))
	}
	if msgs[0] != msgs[1] {
		t.Errorf("the refusals differ:\n%s\n%s", msgs[0], msgs[1])
	}
}

// TestSchemasResolveWithinThemselves keeps what must work offline: internal
// references, and the draft metaschemas, which the library embeds.
func TestSchemasResolveWithinThemselves(t *testing.T) {
	env := newTestEnv(t)
	for _, schema := range []string{
		`{"$defs": {"x": {"type": "object", "required": ["a"]}}, "$ref": "#/$defs/x"}`,
		`{"definitions": {"x": {"type": "object"}}, "$ref": "#/definitions/x"}`,
		`{"$id": "urn:example:root", "$defs": {"x": {"$id": "urn:example:x", "type": "object"}}, "$ref": "urn:example:x"}`,
		`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}`,
		`{"$schema": "https://json-schema.org/draft/2019-09/schema", "type": "object"}`,
		`{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}`,
		`{"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"}`,
		`{"$ref": "https://json-schema.org/draft/2020-12/schema"}`,
	} {
		req := prompt("hello", map[string]string{sim.MetaReply: `{"a": 1}`})
		req.OutputJsonSchema = schema
		evs, st := env.streamAll(t, req)
		if st.Code() != codes.OK {
			t.Errorf("schema %s: status %v %q", schema, st.Code(), st.Message())
			continue
		}
		checkContract(t, evs, st)
		if got := transitions(evs); len(got) != 1 || got[0] != "COMPLETED" {
			t.Errorf("schema %s: transitions %v, want [COMPLETED]", schema, got)
		}
	}
}

// callBounded runs req with rpc under a short deadline, so that a handler
// that hangs fails the test instead of blocking it, and returns the status
// and everything the caller saw, as text.
func callBounded(t *testing.T, env *testEnv, rpc string, req *completionv1.CompleteRequest) (*status.Status, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	var seen strings.Builder
	var err error
	if rpc == "Complete" {
		var res *completionv1.CompleteResponse
		res, err = env.client.Complete(ctx, req)
		seen.WriteString(prototext.Format(res))
	} else {
		var st interface {
			Recv() (*completionv1.CompletionEvent, error)
		}
		st, err = env.client.Stream(ctx, req)
		for err == nil {
			var ev *completionv1.CompletionEvent
			if ev, err = st.Recv(); err == nil {
				seen.WriteString(prototext.Format(ev))
			}
		}
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	s := status.Convert(err)
	if s.Code() == codes.DeadlineExceeded {
		t.Fatalf("%s did not answer within 5s: %v", rpc, err)
	}
	fmt.Fprintf(&seen, "%s\n%v\n", prototext.Format(s.Proto()), s.Details())
	return s, seen.String()
}
