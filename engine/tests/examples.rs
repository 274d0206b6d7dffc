//! The example configs in `examples/` load, validate and resolve (so they stay true to the code).

#![allow(clippy::unwrap_used)]

use std::path::Path;

#[test]
fn every_example_config_is_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let cfg = spillway::config::load(&path).unwrap_or_else(|e| panic!("{e}"));
            let machine = spillway::coremap::Machine {
                cores: vec![0, 1, 2, 3],
            };
            spillway::coremap::resolve(&cfg, &machine)
                .unwrap_or_else(|(k, m)| panic!("{}: {k}: {m}", path.display()));
            seen += 1;
        }
    }
    assert!(seen >= 2, "examples/ should hold the example configs");
}
