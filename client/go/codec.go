package turnstile

import (
	"fmt"

	"google.golang.org/protobuf/proto"
)

// codec marshals with google.golang.org/protobuf (APIv2). Debian's gRPC 1.33
// default codec goes through github.com/golang/protobuf 1.3, which cannot
// marshal APIv2-generated messages with oneofs; this codec is forced on
// every call of the Client's connection (grpc.ForceCodec), so the library
// works with both Debian's and current upstream gRPC.
type codec struct{}

func (codec) Name() string { return "proto" }

func (codec) Marshal(v interface{}) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("turnstile codec: %T is not a proto.Message", v)
	}
	return proto.Marshal(m)
}

func (codec) Unmarshal(data []byte, v interface{}) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("turnstile codec: %T is not a proto.Message", v)
	}
	return proto.Unmarshal(data, m)
}
