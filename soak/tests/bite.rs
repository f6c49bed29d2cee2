//! The checker bites: each deliberately broken mode must fail the verdict (exit code 1) on
//! the check it breaks. Each runs a real soak of about a minute, so they are ignored by
//! default; CI runs them two at a time with
//! `cargo test -p ydb-coordination-soak -- --ignored --test-threads=2`.

use std::process::Command;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Runs a soak of `duration` in `bite` mode; returns the exit code and the summary.
fn soak(bite: &str, seed: &str, duration: &str) -> Result<(Option<i32>, String)> {
    let out = Command::new(env!("CARGO_BIN_EXE_ydb-coordination-soak"))
        .args([
            "--seed",
            seed,
            "--duration",
            duration,
            "--workers",
            "6",
            "--bite",
            bite,
        ])
        .output()?;
    let summary = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{summary}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    Ok((out.status.code(), summary))
}

/// The number of violations the summary lists for `check`.
fn violations(summary: &str, check: &str) -> usize {
    let prefix = format!("  {check}: ");
    summary
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Skips a test whose Debian `package` is missing, saying what to install; in CI (`CI=true`)
/// fails it instead.
fn skip(package: &str) -> Result<()> {
    assert_ne!(
        std::env::var("CI").as_deref(),
        Ok("true"),
        "CI needs {package} (apt-get install {package})"
    );
    eprintln!("skipped: {package} is not installed (apt-get install {package})");
    Ok(())
}

#[test]
#[ignore = "a real soak of about a minute"]
fn writing_after_the_token_fired_fails_the_verdict() -> Result<()> {
    let (code, summary) = soak("keep-writing", "11", "60s")?;
    assert_eq!(code, Some(1), "the verdict must fail");
    assert!(violations(&summary, "write-after-fired") > 0, "{summary}");
    Ok(())
}

#[test]
#[ignore = "a real soak of about a minute"]
fn skipping_the_transition_fails_the_verdict() -> Result<()> {
    let (code, summary) = soak("skip-transition", "12", "60s")?;
    assert_eq!(code, Some(1), "the verdict must fail");
    assert!(violations(&summary, "reshard-steps") > 0, "{summary}");
    Ok(())
}

#[test]
#[ignore = "a real soak of about a minute"]
fn a_clock_slower_than_the_assumption_breaks_the_lease_deadline() -> Result<()> {
    // The slow clock comes from Debian's libfaketime, preloaded into every worker.
    if !std::path::Path::new("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1").exists() {
        return skip("libfaketime");
    }
    let (code, summary) = soak("slow-clock", "13", "60s")?;
    assert_eq!(code, Some(1), "the verdict must fail");
    assert!(violations(&summary, "lease-deadline") > 0, "{summary}");
    Ok(())
}

#[test]
#[ignore = "a real soak of about a minute"]
fn writing_to_postgres_without_the_fence_fails_the_verdict() -> Result<()> {
    let (code, summary) = soak("unfenced-postgres", "14", "60s")?;
    // Without PostgreSQL the controller says what to install and writes to the register
    // alone; in CI (`CI=true`) it cannot run at all.
    if !summary
        .lines()
        .any(|l| l.starts_with("resource: PostgreSQL"))
    {
        return skip("postgresql");
    }
    assert_eq!(code, Some(1), "the verdict must fail");
    // Stale holders' late writes committed after their successors': what PostgreSQL kept
    // shows the lost updates. Each was still made in a tenure that had begun.
    assert!(violations(&summary, "resource-tokens") > 0, "{summary}");
    assert_eq!(violations(&summary, "resource-tenure"), 0, "{summary}");
    Ok(())
}
