//! Decimal numbers for people and for SVG paths, written without the standard library's float
//! formatting.
//!
//! `format!("{:.1}", x)` pulls in core's exact float-to-decimal code (Grisu and Dragon4, some
//! 15 KB of wasm), and because of how the bundle is split, code that any page uses through a
//! function pointer stays in the part every first visit downloads. Rounding to a fixed number
//! of places through an integer needs none of it.

use std::fmt;

/// `value` rounded to `places` decimal places (at most 3), e.g. `fixed(12.345, 1)` shows `12.3`.
pub fn fixed(value: f64, places: u8) -> Fixed {
    Fixed { value, places: places.min(3) }
}

/// See [`fixed`].
#[derive(Debug, Clone, Copy)]
pub struct Fixed {
    value: f64,
    places: u8,
}

impl fmt::Display for Fixed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Fixed { value, places } = *self;
        if value.is_nan() {
            return f.write_str("NaN");
        }
        if value.is_infinite() {
            return f.write_str(if value > 0.0 { "inf" } else { "-inf" });
        }
        let scale = [1u64, 10, 100, 1000][usize::from(places)];
        // Saturates far beyond anything shown; halves round away from zero.
        let scaled = (value.abs() * scale as f64).round() as u64;
        let sign = if value < 0.0 && scaled != 0 { "-" } else { "" };
        if places == 0 {
            write!(f, "{sign}{scaled}")
        } else {
            write!(f, "{sign}{}.{:0width$}", scaled / scale, scaled % scale, width = usize::from(places))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixed;

    /// Equal to `{:.N}` except that a value rounding to zero is shown without a sign (the
    /// standard library writes `-0`).
    #[test]
    fn matches_the_standard_formatting_away_from_ties() {
        for value in [0.0, 0.04, 1.0, 9.96, 12.34, 99.99, 123.456, 600.0, 1e6 + 0.26, -3.21, -0.26, -0.04] {
            for places in 0..=2u8 {
                let standard = format!("{value:.*}", usize::from(places));
                let unsigned_zero = standard.trim_start_matches('-').chars().all(|c| c == '0' || c == '.');
                let expected = if unsigned_zero { standard.trim_start_matches('-').to_owned() } else { standard };
                assert_eq!(fixed(value, places).to_string(), expected, "{value} to {places} places");
            }
        }
    }

    #[test]
    fn odd_values_are_shown_not_hidden() {
        assert_eq!(fixed(-0.01, 1).to_string(), "0.0");
        assert_eq!(fixed(f64::NAN, 1).to_string(), "NaN");
        assert_eq!(fixed(f64::NEG_INFINITY, 1).to_string(), "-inf");
        assert_eq!(fixed(2.5, 9).to_string(), "2.500");
    }
}
