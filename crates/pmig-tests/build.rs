//! Compiles every `tests/scenarios/*.c` (at the workspace root) into
//! `$OUT_DIR/scenarios/<name>` and exposes that directory as `SCENARIO_DIR`.
//! Flags: `cc -std=c11 -O1 -pthread` (AVX code is enabled per function with
//! `__attribute__((target))` and a run-time cpuid check, so no `-mavx`).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let src = manifest
        .join("../../tests/scenarios")
        .canonicalize()
        .expect("tests/scenarios is missing");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("scenarios");
    std::fs::create_dir_all(&out).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-env-changed=CC");
    let mut entries: Vec<_> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        println!("cargo:rerun-if-changed={}", path.display());
        if path.extension().and_then(|e| e.to_str()) != Some("c") {
            continue;
        }
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        let exe = out.join(&name);
        let res = Command::new(&cc)
            .args([
                "-std=c11", "-O1", "-pthread", "-Wall", "-Wextra", "-g", "-o",
            ])
            .arg(&exe)
            .arg(&path)
            .output()
            .unwrap_or_else(|e| panic!("cannot run the C compiler '{cc}': {e}"));
        if !res.status.success() {
            panic!(
                "compiling scenario {} failed:\n{}{}",
                path.display(),
                String::from_utf8_lossy(&res.stdout),
                String::from_utf8_lossy(&res.stderr)
            );
        }
        if !res.stderr.is_empty() {
            println!(
                "cargo:warning={}: {}",
                name,
                String::from_utf8_lossy(&res.stderr)
                    .lines()
                    .next()
                    .unwrap_or("")
            );
        }
    }
    println!("cargo:rustc-env=SCENARIO_DIR={}", out.display());
}
