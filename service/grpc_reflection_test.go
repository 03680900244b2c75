package service

import (
	"maps"
	"slices"
	"strings"
	"testing"

	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// fileContaining asks the server's reflection (v1) for the file that
// defines symbol and returns every file it sent, by name.
func fileContaining(t *testing.T, client reflectionv1.ServerReflectionClient, symbol string) map[string]*descriptorpb.FileDescriptorProto {
	t.Helper()
	st, err := client.ServerReflectionInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.CloseSend() }()
	if err := st.Send(&reflectionv1.ServerReflectionRequest{
		MessageRequest: &reflectionv1.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: symbol}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if e := resp.GetErrorResponse(); e != nil {
		t.Fatalf("reflection of %s: %s", symbol, e.GetErrorMessage())
	}
	files := map[string]*descriptorpb.FileDescriptorProto{}
	for _, b := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
		fdp := new(descriptorpb.FileDescriptorProto)
		if err := proto.Unmarshal(b, fdp); err != nil {
			t.Fatal(err)
		}
		files[fdp.GetName()] = fdp
	}
	return files
}

// TestReflectionServesComments: what grpcurl describe reads — the file of
// a symbol, fetched by reflection — carries the proto's comments of the
// service, its RPCs and its messages, and the files it imports come along.
// Health, which is not ours, still resolves.
func TestReflectionServesComments(t *testing.T) {
	env := newTestEnv(t)
	conn := serveBufconn(t, env.grpc)
	t.Cleanup(func() { conn.Close() })
	client := reflectionv1.NewServerReflectionClient(conn)
	for _, tc := range []struct {
		symbol  string
		file    string
		comment string // a part of the symbol's leading comment; "" for none expected
	}{
		{"completion.v1.Completion", "completion/v1/completion.proto", "Completion runs recoverable completions against the configured upstream routes."},
		{"completion.v1.Completion.Stream", "completion/v1/completion.proto", "Stream runs one completion and streams its events"},
		{"completion.v1.Completion.Session", "completion/v1/completion.proto", "Session runs a multi-turn completion"},
		{"completion.v1.Completion.Cancel", "completion/v1/completion.proto", "Cancel ends a running completion"},
		{"completion.v1.Completion.ListRoutes", "completion/v1/completion.proto", "ListRoutes lists the routes the caller may use"},
		{"completion.v1.RouteCapabilities.prefill", "completion/v1/completion.proto", "prefill is true when the route takes an assistant prefill"},
		{"completion.v1.CompleteRequest", "completion/v1/completion.proto", "CompleteRequest asks for one completion."},
		{"completion.v1.CompleteRequest.route", "completion/v1/completion.proto", "route names the configured upstream route"},
		{"grpc.health.v1.Health", "grpc/health/v1/health.proto", ""},
	} {
		t.Run(tc.symbol, func(t *testing.T) {
			sent := fileContaining(t, client, tc.symbol)
			fdp, ok := sent[tc.file]
			if !ok {
				t.Fatalf("reflection sent %v, not %s", slices.Sorted(maps.Keys(sent)), tc.file)
			}
			for _, dep := range fdp.GetDependency() {
				if _, ok := sent[dep]; !ok {
					t.Errorf("reflection did not send %s, which %s imports", dep, tc.file)
				}
			}
			if tc.comment == "" {
				return
			}
			fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
			if err != nil {
				t.Fatal(err)
			}
			d := findIn(fd, protoreflect.FullName(tc.symbol))
			if d == nil {
				t.Fatalf("%s is not in the file reflection sent", tc.symbol)
			}
			if got := fd.SourceLocations().ByDescriptor(d).LeadingComments; !strings.Contains(got, tc.comment) {
				t.Errorf("leading comment of %s = %q, want it to contain %q", tc.symbol, got, tc.comment)
			}
		})
	}
}

// TestDescriptorSetMatchesCompiledCode: the embedded descriptors with
// source info describe exactly the API compiled into the server — the
// same file, options included, once the comments are taken out — so that
// reflection never serves a schema the server does not speak.
func TestDescriptorSetMatchesCompiledCode(t *testing.T) {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(completionv1.DescriptorSetWithSourceInfo(), &set); err != nil {
		t.Fatal(err)
	}
	if len(set.GetFile()) != 1 {
		t.Fatalf("the set holds %d files, want completion/v1/completion.proto alone", len(set.GetFile()))
	}
	got := set.GetFile()[0]
	if len(got.GetSourceCodeInfo().GetLocation()) == 0 {
		t.Fatal("the embedded descriptor has no source info")
	}
	got = proto.CloneOf(got)
	got.SourceCodeInfo = nil
	want := protodesc.ToFileDescriptorProto(completionv1.File_completion_v1_completion_proto)
	if !proto.Equal(got, want) {
		t.Errorf("the embedded descriptor differs from the compiled one: run make generate")
	}
}

func TestSourceInfoResolverRefusesBadSets(t *testing.T) {
	unresolved, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{{
		Name: proto.String("x.proto"), Package: proto.String("x"), Dependency: []string{"nowhere.proto"}, Syntax: proto.String("proto3"),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	again, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		{Name: proto.String("y.proto"), Package: proto.String("y"), Syntax: proto.String("proto3")},
		{Name: proto.String("y.proto"), Package: proto.String("y"), Syntax: proto.String("proto3")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		set  []byte
	}{
		{"not a descriptor set", []byte("\xff\xff\xff")},
		{"unresolved import", unresolved},
		{"a file twice", again},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := sourceInfoResolver(tc.set); err == nil {
				t.Error("no error")
			}
		})
	}
}

// findIn returns the descriptor named name in fd: a service, a method, a
// message or a field of a top-level message.
func findIn(fd protoreflect.FileDescriptor, name protoreflect.FullName) protoreflect.Descriptor {
	if s := fd.Services().ByName(name.Name()); s != nil && s.FullName() == name {
		return s
	}
	if m := fd.Messages().ByName(name.Name()); m != nil && m.FullName() == name {
		return m
	}
	parent := name.Parent()
	if s := fd.Services().ByName(parent.Name()); s != nil && s.FullName() == parent {
		return s.Methods().ByName(name.Name())
	}
	if m := fd.Messages().ByName(parent.Name()); m != nil && m.FullName() == parent {
		return m.Fields().ByName(name.Name())
	}
	return nil
}
