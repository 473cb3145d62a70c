// Compile the service definition with protox (a protobuf compiler written in
// Rust), so building needs no system `protoc`.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/offload.proto");
    let fds = protox::compile(["proto/offload.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Bulk data as `bytes::Bytes`: decoding slices the receive buffer
        // instead of copying it.
        .bytes(".")
        .compile_fds(fds)?;
    Ok(())
}
