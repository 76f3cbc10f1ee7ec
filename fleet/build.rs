//! Generates the etcd v3 gRPC client (KV, Lease, Watch) from `proto/etcd.proto` with the
//! protoc that `protoc-bin-vendored` ships, so a fresh machine needs no protoc installed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/etcd.proto");
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY of the process: build scripts are single-threaded; prost-build reads PROTOC.
    std::env::set_var("PROTOC", protoc);
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .compile_protos(&["proto/etcd.proto"], &["proto"])?;
    Ok(())
}
