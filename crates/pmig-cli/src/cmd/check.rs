use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_a: Args) -> Result<i32> {
    let results = pmig_engine::check::run_checks();
    let mut failed = 0;
    for r in &results {
        let tag = match (r.ok, r.required) {
            (true, _) => "ok  ",
            (false, true) => {
                failed += 1;
                "FAIL"
            }
            (false, false) => "warn",
        };
        println!("{tag} {:<18} {}", r.name, r.detail);
    }
    if failed == 0 {
        println!("pmig check: this kernel offers everything the engine needs");
        Ok(0)
    } else {
        println!("pmig check: {failed} required facilities are missing");
        Ok(1)
    }
}
