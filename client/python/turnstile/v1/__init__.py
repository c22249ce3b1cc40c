"""turnstile.v1: the protobuf messages (lock_pb2) and gRPC stubs
(lock_pb2_grpc) of protos/turnstile/v1/lock.proto, generated when the
package is built (they are not kept in the source tree)."""
