//! Money. Amounts are integers in micro-dollars (1 USD = 1,000,000 µ$), fine enough for
//! per-second metering of any realistic price; they never pass through a float. People type
//! and read dollars, so this module parses and prints decimal strings exactly.

/// Micro-dollars per dollar.
pub const MICROS_PER_DOLLAR: i64 = 1_000_000;
/// Micro-dollars per cent, Stripe's unit for USD.
pub const MICROS_PER_CENT: i64 = MICROS_PER_DOLLAR / 100;

/// Parses a dollar amount such as `2.49`, `$0.5` or `12` into micro-dollars, exactly.
/// At most six decimal places; negative amounts and exponents are refused.
pub fn parse_dollars(raw: &str) -> Result<i64, String> {
    let text = raw.trim().trim_start_matches('$').trim();
    if text.is_empty() {
        return Err("enter an amount in dollars, e.g. 2.49".into());
    }
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits_ok = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    if !digits_ok(whole) || !digits_ok(fraction) || (whole.is_empty() && fraction.is_empty()) {
        return Err(format!("{raw:?} is not an amount in dollars (e.g. 2.49)"));
    }
    if fraction.len() > 6 {
        return Err("use at most 6 decimal places".into());
    }
    let whole: i64 =
        if whole.is_empty() { 0 } else { whole.parse().map_err(|_| "that amount is too large".to_owned())? };
    let fraction: i64 = format!("{fraction:0<6}").parse().map_err(|_| "that amount is not valid".to_owned())?;
    whole
        .checked_mul(MICROS_PER_DOLLAR)
        .and_then(|w| w.checked_add(fraction))
        .ok_or_else(|| "that amount is too large".to_owned())
}

/// Prints micro-dollars as dollars with at least two decimals: `2490000` → `2.49`,
/// `1234567` → `1.234567`.
pub fn format_dollars(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let abs = micros.unsigned_abs();
    let whole = abs / MICROS_PER_DOLLAR as u64;
    let mut fraction = format!("{:06}", abs % MICROS_PER_DOLLAR as u64);
    while fraction.len() > 2 && fraction.ends_with('0') {
        fraction.pop();
    }
    format!("{sign}{whole}.{fraction}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_exactly() {
        assert_eq!(parse_dollars("2.49"), Ok(2_490_000));
        assert_eq!(parse_dollars("$0.5"), Ok(500_000));
        assert_eq!(parse_dollars("12"), Ok(12_000_000));
        assert_eq!(parse_dollars(".000001"), Ok(1));
        for bad in ["", "-1", "1e3", "abc", "1.2.3", "0.0000001", "."] {
            assert!(parse_dollars(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn formats_with_at_least_cents() {
        assert_eq!(format_dollars(2_490_000), "2.49");
        assert_eq!(format_dollars(12_000_000), "12.00");
        assert_eq!(format_dollars(1_234_567), "1.234567");
        assert_eq!(format_dollars(1), "0.000001");
    }

    proptest! {
        #[test]
        fn format_then_parse_is_identity(micros in 0i64..10_000_000_000_000) {
            prop_assert_eq!(parse_dollars(&format_dollars(micros)), Ok(micros));
        }
    }
}
