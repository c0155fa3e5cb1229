//! The `wasmformer` command's tests, as one test binary: each module is one of the files beside
//! this one (one binary, not one per file: each would link all of wasmformer). Run one file's
//! tests with `cargo test -p wasmformer --test integration <module>::`.

mod cli;
mod cli_writer;
mod dev_writers;
mod leader_election;
mod manifests;
mod oci;
mod polyglot;
mod resident;
mod shutdown;
mod static_image;
