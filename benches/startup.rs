//! Start-up benchmark (work in progress).
fn main() {}
