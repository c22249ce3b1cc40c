// For builds against current upstream gRPC in module mode (the stubs in
// turnstilepb are committed: no protoc needed). The project itself builds and tests
// this library offline in GOPATH mode against Debian's packages (build.sh):
// Go 1.19, gRPC 1.33, protobuf-go 1.28; see client/go/README.md. It needs
// Go >= 1.21 (the go line below) and is not built or tested by the project.
module turnstile/client/go

go 1.21

require (
	google.golang.org/grpc v1.64.0
	google.golang.org/protobuf v1.34.1
)
