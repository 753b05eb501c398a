//! Reading one typed property, with YCSB's default, into a typed error on bad input.

use crate::error::YcsbError;
use crate::properties::Properties;

/// A non-negative integer (Java `Long.parseLong`, negatives refused).
pub fn integer(props: &Properties, key: &str, default: u64) -> Result<u64, YcsbError> {
    let Some(text) = props.get(key) else {
        return Ok(default);
    };
    text.parse::<i64>()
        .ok()
        .and_then(|v| u64::try_from(v).ok())
        .ok_or_else(|| invalid(key, text, "a non-negative integer"))
}

/// A finite, non-negative number (Java `Double.parseDouble`).
pub fn number(props: &Properties, key: &str, default: f64) -> Result<f64, YcsbError> {
    let Some(text) = props.get(key) else {
        return Ok(default);
    };
    text.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| invalid(key, text, "a finite non-negative number"))
}

/// `true` or `false`, any case (Java's `Boolean.parseBoolean` takes anything else as
/// false; a typo is refused here instead).
pub fn boolean(props: &Properties, key: &str, default: bool) -> Result<bool, YcsbError> {
    let Some(text) = props.get(key) else {
        return Ok(default);
    };
    match text.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid(key, text, "`true` or `false`")),
    }
}

/// One of `allowed` (a comma-separated list, as printed in the error).
pub fn choice<'a>(
    props: &'a Properties,
    key: &str,
    default: &'a str,
    allowed: &'static str,
) -> Result<&'a str, YcsbError> {
    let value = props.get(key).unwrap_or(default);
    if allowed.split(", ").any(|a| a == value) {
        return Ok(value);
    }
    Err(YcsbError::UnknownChoice {
        key: key.into(),
        value: value.into(),
        allowed,
    })
}

fn invalid(key: &str, value: &str, expected: &'static str) -> YcsbError {
    YcsbError::InvalidValue {
        key: key.into(),
        value: value.into(),
        expected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(text: &str) -> Properties {
        let mut p = Properties::new();
        p.merge_text("t", text).unwrap();
        p
    }

    #[test]
    fn defaults_and_values() {
        let p = props("n=12\nx=0.5\nb=TRUE\nc=zipfian\n");
        assert_eq!(integer(&p, "n", 1).unwrap(), 12);
        assert_eq!(integer(&p, "missing", 7).unwrap(), 7);
        assert_eq!(number(&p, "x", 0.0).unwrap(), 0.5);
        assert!(boolean(&p, "b", false).unwrap());
        assert_eq!(
            choice(&p, "c", "uniform", "uniform, zipfian").unwrap(),
            "zipfian"
        );
    }

    #[test]
    fn bad_values_are_typed_errors() {
        let p = props("n=-3\nm=ten\nx=NaN\ny=-0.5\nb=yes\nc=gaussian\n");
        for key in ["n", "m"] {
            assert!(matches!(
                integer(&p, key, 0),
                Err(YcsbError::InvalidValue { .. })
            ));
        }
        for key in ["x", "y"] {
            assert!(matches!(
                number(&p, key, 0.0),
                Err(YcsbError::InvalidValue { .. })
            ));
        }
        assert!(matches!(
            boolean(&p, "b", true),
            Err(YcsbError::InvalidValue { .. })
        ));
        let err = choice(&p, "c", "uniform", "uniform, zipfian").unwrap_err();
        assert!(matches!(err, YcsbError::UnknownChoice { .. }));
        assert!(err.to_string().contains("gaussian"));
    }
}
