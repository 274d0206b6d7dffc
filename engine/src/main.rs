//! The `spillway` binary. The engine (shards, the Iggy source, the sinks) is built by later
//! issues; until then the binary says so and exits with a non-zero status rather than
//! pretending to run.

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!(
        "spillway {}: the engine is not built yet (see the open issues); \
         `spillway-bench codec` is the runnable part today",
        env!("CARGO_PKG_VERSION")
    );
    ExitCode::from(2)
}
