//! The embedding example in the workspace README is `examples/embed.rs` verbatim, so the
//! README's code compiles with every `cargo test --workspace` (which builds the examples).

use std::path::Path;

#[test]
fn the_readme_shows_the_embed_example_verbatim() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let example = std::fs::read_to_string(root.join("examples/embed.rs")).unwrap();
    let readme = std::fs::read_to_string(root.join("../README.md")).unwrap();
    let block = format!("```rust\n{example}```\n");
    assert!(
        readme.contains(&block),
        "README.md's rust block must be kvstore/examples/embed.rs verbatim"
    );
}
