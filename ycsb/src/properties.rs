//! YCSB properties: `key=value` text, layered.
//!
//! # Format
//!
//! One property per line, `key=value` (or `key: value`, as Java's `Properties` allows);
//! both sides trimmed. Blank lines and lines starting with `#` or `!` are comments.
//! Anything else is a [`YcsbError::Malformed`] error naming the file and line (Java
//! would quietly take a line without separator as a key with an empty value).
//!
//! # Precedence
//!
//! Sources are applied in the order given and a later value replaces an earlier one:
//! as YCSB's client does, a shipped workload (`--workload`), then each `-P FILE` in
//! order, then each `-p key=value` in order, then the shorthand flags (`--records`,
//! `--ops`, `--seed`).

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::YcsbError;
use crate::workload::named::named_text;

/// An ordered set of properties.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Properties {
    values: BTreeMap<String, String>,
}

impl Properties {
    /// No properties: every CoreWorkload default.
    pub fn new() -> Self {
        Self::default()
    }

    /// The properties of a shipped workload (`a`–`f`, `load`, `cxlalloc-a`, `cxlalloc-d`).
    pub fn named(name: &str) -> Result<Self, YcsbError> {
        let text = named_text(name).ok_or_else(|| YcsbError::UnknownWorkload(name.into()))?;
        let mut props = Self::new();
        props.merge_text(&format!("workload {name}"), text)?;
        Ok(props)
    }

    /// Applies a property file (`-P FILE`).
    pub fn merge_file(&mut self, path: &Path) -> Result<&mut Self, YcsbError> {
        let text = std::fs::read_to_string(path).map_err(|source| YcsbError::Io {
            path: path.to_owned(),
            source,
        })?;
        self.merge_text(&path.display().to_string(), &text)
    }

    /// Applies property text; `origin` names it in errors.
    pub fn merge_text(&mut self, origin: &str, text: &str) -> Result<&mut Self, YcsbError> {
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            let (key, value) = split_pair(line).ok_or_else(|| YcsbError::Malformed {
                origin: format!("{origin}:{}", number + 1),
                line: line.into(),
            })?;
            self.set(key, value);
        }
        Ok(self)
    }

    /// Applies one `-p key=value` argument.
    pub fn merge_arg(&mut self, arg: &str) -> Result<&mut Self, YcsbError> {
        let (key, value) = split_pair(arg.trim()).ok_or_else(|| YcsbError::Malformed {
            origin: "-p".into(),
            line: arg.into(),
        })?;
        Ok(self.set(key, value))
    }

    /// Sets `key` to `value`, replacing any earlier value.
    pub fn set(&mut self, key: &str, value: &str) -> &mut Self {
        self.values.insert(key.trim().into(), value.trim().into());
        self
    }

    /// Shorthand for `recordcount`.
    pub fn records(&mut self, n: u64) -> &mut Self {
        self.set("recordcount", &n.to_string())
    }

    /// Shorthand for `operationcount`.
    pub fn ops(&mut self, n: u64) -> &mut Self {
        self.set("operationcount", &n.to_string())
    }

    /// Shorthand for `podkv.seed`.
    pub fn seed(&mut self, seed: u64) -> &mut Self {
        self.set("podkv.seed", &seed.to_string())
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// Whether `key` is set.
    pub fn contains(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    /// Every key that is set, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(String::as_str)
    }
}

/// Splits at the first `=` or `:`; the key must not be empty.
fn split_pair(line: &str) -> Option<(&str, &str)> {
    let at = line.find(['=', ':'])?;
    let (key, value) = (line[..at].trim(), line[at + 1..].trim());
    (!key.is_empty()).then_some((key, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_blank_lines_and_separators() {
        let mut props = Properties::new();
        props
            .merge_text(
                "t",
                "# a comment\n! another\n\n  recordcount = 10 \nrequestdistribution: zipfian\nx=a=b\n",
            )
            .unwrap();
        assert_eq!(props.get("recordcount"), Some("10"));
        assert_eq!(props.get("requestdistribution"), Some("zipfian"));
        assert_eq!(props.get("x"), Some("a=b"));
        assert_eq!(props.keys().count(), 3);
    }

    #[test]
    fn later_sources_override_earlier() {
        let mut props = Properties::named("a").unwrap();
        assert_eq!(props.get("readproportion"), Some("0.5"));
        props.merge_text("f1", "readproportion=0.7\n").unwrap();
        props.merge_text("f2", "readproportion=0.8\n").unwrap();
        assert_eq!(props.get("readproportion"), Some("0.8"));
        props.merge_arg("readproportion=0.9").unwrap();
        props.records(5).ops(6).seed(7);
        assert_eq!(props.get("readproportion"), Some("0.9"));
        assert_eq!(props.get("recordcount"), Some("5"));
        assert_eq!(props.get("operationcount"), Some("6"));
        assert_eq!(props.get("podkv.seed"), Some("7"));
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        let err = Properties::new()
            .merge_text("my.properties", "a=1\njust-a-word\n")
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("my.properties:2"), "{text}");
        assert!(text.contains("just-a-word"), "{text}");
        assert!(Properties::new().merge_arg("=3").is_err());
        assert!(Properties::new().merge_arg("novalue").is_err());
    }

    #[test]
    fn unknown_names_and_missing_files_are_errors() {
        assert!(matches!(
            Properties::named("z"),
            Err(YcsbError::UnknownWorkload(_))
        ));
        let err = Properties::new()
            .merge_file(Path::new("/nonexistent/podkv/workload"))
            .unwrap_err();
        assert!(matches!(err, YcsbError::Io { .. }));
    }
}
