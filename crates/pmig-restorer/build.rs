//! Builds the freestanding restorer into a flat, position-independent blob.
use std::path::PathBuf;
use std::process::Command;

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{cmd:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    for f in [
        "restorer/restorer.c",
        "restorer/plan.h",
        "restorer/restorer.ld",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    let elf = out.join("restorer.elf");
    run(Command::new(&cc)
        .args([
            "-Os",
            "-fPIE",
            "-ffreestanding",
            "-nostdlib",
            "-static",
            "-fno-stack-protector",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
            "-fcf-protection=none",
            "-fno-builtin",
            "-fvisibility=hidden",
            "-mgeneral-regs-only",
            "-Wall",
            "-Werror",
            "-Wl,-T,restorer/restorer.ld",
            "-Wl,--build-id=none",
            "-Wl,-q",
            "-o",
        ])
        .arg(&elf)
        .arg("restorer/restorer.c"));
    // Position independence: no absolute relocation may survive.
    let relocs = run(Command::new("readelf").arg("-rW").arg(&elf));
    for bad in ["R_X86_64_64", "R_X86_64_32", "R_X86_64_32S", "R_X86_64_GOT"] {
        if relocs.contains(bad) {
            panic!("restorer has an absolute relocation ({bad}); it must be position independent:\n{relocs}");
        }
    }
    let syms = run(Command::new("nm").arg(&elf));
    if !syms.lines().any(|l| l.ends_with(" restorer_entry")) {
        panic!("restorer_entry missing");
    }
    let entry_at_zero = syms
        .lines()
        .any(|l| l.ends_with(" restorer_entry") && l.starts_with("0000000000000000"));
    assert!(entry_at_zero, "restorer_entry must be at offset 0:\n{syms}");
    run(Command::new("objcopy")
        .args([
            "-O",
            "binary",
            "--only-section=.text",
            "--only-section=.rodata",
            "--only-section=.data",
            "--only-section=.bss",
        ])
        .arg(&elf)
        .arg(out.join("restorer.bin")));
}
