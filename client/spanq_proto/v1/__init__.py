"""The gRPC stubs generated from protos/ by `make proto` (do not edit): the SDK and the
server both import them."""
