//! Command-line values shared by the binaries: a number out of range is refused with the range
//! and its unit, as a usage error (clap's own messages say "invalid digit" for `-5` and give
//! `u64::MAX` as the upper bound).

/// A clap parser of a whole number from `min` to `max` (`u64::MAX`: no upper bound) whose error
/// says the range and unit (a zero interval or limit would be taken and misbehave, not be
/// refused, otherwise).
pub fn whole_number(
    min: u64,
    max: u64,
    unit: &'static str,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |text| {
        text.trim()
            .parse::<u64>()
            .ok()
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| {
                if max == u64::MAX {
                    format!("expected {unit}, at least {min}")
                } else {
                    format!("expected {unit} from {min} to {max}")
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_and_unit_are_said() {
        let ms = whole_number(10, 3_600_000, "milliseconds");
        assert_eq!(ms("10"), Ok(10));
        for bad in ["5", "-5", "1.5", "x", "3600001"] {
            assert_eq!(
                ms(bad),
                Err("expected milliseconds from 10 to 3600000".to_owned())
            );
        }
        let count = whole_number(1, u64::MAX, "a count of values");
        assert_eq!(
            count("0"),
            Err("expected a count of values, at least 1".to_owned())
        );
    }
}
