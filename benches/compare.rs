//! Side-by-side benchmarks (placeholder until the suite lands).
fn main() {}
