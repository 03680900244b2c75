package service

import (
	"fmt"
	"log/slog"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// registerReflection serves gRPC reflection (v1 and v1alpha, as
// reflection.Register does) from descriptors that keep the proto files'
// comments, so that `grpcurl describe completion.v1.Completion` shows the
// API's documentation: the descriptors protoc-gen-go links into the binary
// have none. If the embedded set cannot be used, reflection serves those
// linked descriptors, without comments, and says so in the log.
func registerReflection(g *grpc.Server, log *slog.Logger) {
	resolver, err := reflectionResolver()
	if err != nil {
		log.Warn("reflection serves the API without its comments", "err", err)
		resolver = protoregistry.GlobalFiles
	}
	opts := reflection.ServerOptions{Services: g, DescriptorResolver: resolver}
	reflectionv1.RegisterServerReflectionServer(g, reflection.NewServerV1(opts))
	reflectionv1alpha.RegisterServerReflectionServer(g, reflection.NewServer(opts))
}

// reflectionResolver resolves completion.v1 from its descriptor set with
// source info (completionv1.DescriptorSetWithSourceInfo, generated with the
// Go code), and everything else — its imports, health, reflection itself —
// from protoregistry.GlobalFiles. It is built once.
var reflectionResolver = sync.OnceValues(func() (protodesc.Resolver, error) {
	return sourceInfoResolver(completionv1.DescriptorSetWithSourceInfo())
})

// sourceInfoResolver builds the files of the serialized FileDescriptorSet b
// over protoregistry.GlobalFiles; b's files win.
func sourceInfoResolver(b []byte) (protodesc.Resolver, error) {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("descriptor set: %w", err)
	}
	files := new(protoregistry.Files)
	layered := layeredResolver{files, protoregistry.GlobalFiles}
	for _, fdp := range set.GetFile() {
		fd, err := protodesc.NewFile(fdp, layered)
		if err != nil {
			return nil, fmt.Errorf("descriptor set: %w", err)
		}
		if err := files.RegisterFile(fd); err != nil {
			return nil, fmt.Errorf("descriptor set: %w", err)
		}
	}
	return layered, nil
}

// layeredResolver asks each resolver in turn; the first that knows a file
// or a name answers.
type layeredResolver []protodesc.Resolver

// FindFileByPath implements protodesc.Resolver.
func (l layeredResolver) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	for _, r := range l {
		if fd, err := r.FindFileByPath(path); err == nil {
			return fd, nil
		}
	}
	return nil, fmt.Errorf("%q: %w", path, protoregistry.NotFound)
}

// FindDescriptorByName implements protodesc.Resolver.
func (l layeredResolver) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	for _, r := range l {
		if d, err := r.FindDescriptorByName(name); err == nil {
			return d, nil
		}
	}
	return nil, fmt.Errorf("%q: %w", name, protoregistry.NotFound)
}
