//! The command line of every Baton program: how a command line that does not parse ends (one
//! exit status for all of them), and values shared by the binaries (a number out of range is
//! refused with the range and its unit, as a usage error: clap's own messages say "invalid
//! digit" for `-5` and give `u64::MAX` as the upper bound).

/// Exit status of every Baton program whose command line does not parse or is out of range
/// (`EX_USAGE` of sysexits.h). Not clap's own 2: `bus-inspect wait` says a timeout with 2 and
/// `bus-stress read` a bad read, and a script must not take a typo for either.
pub const EXIT_USAGE: i32 = 64;

/// Parses the process's command line; one that does not parse prints clap's message and exits
/// with [`EXIT_USAGE`] (`--help` and `--version` print and exit 0).
pub fn parse_args<A: clap::Parser>() -> A {
    A::try_parse().unwrap_or_else(|e| exit_usage(e))
}

/// Ends the process on a command-line error found by clap or after it (a check clap cannot
/// make alone): its message on stderr, exit status [`EXIT_USAGE`]; help and version requests
/// print to stdout and exit 0.
pub fn exit_usage(error: clap::Error) -> ! {
    // A broken stderr loses the message, not the exit status.
    let _ = error.print();
    std::process::exit(if error.use_stderr() { EXIT_USAGE } else { 0 })
}

/// A clap parser of a whole number from `min` to `max` (`u64::MAX`: no upper bound) whose error
/// says the range and unit (a zero interval or limit would be taken and misbehave, not be
/// refused, otherwise).
pub fn whole_number(
    min: u64,
    max: u64,
    unit: &'static str,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |text| {
        in_range(text, min, max).ok_or_else(|| {
            if max == u64::MAX {
                format!("expected {unit}, at least {min}")
            } else {
                format!("expected {unit} from {min} to {max}")
            }
        })
    }
}

/// A clap parser of a number from `min` to `max`, fractions allowed, whose error says the range
/// and unit (`nan` and the infinities are never in it).
pub fn decimal_number(
    min: f64,
    max: f64,
    unit: &'static str,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |text| {
        in_range(text, min, max).ok_or_else(|| format!("expected {unit} from {min} to {max}"))
    }
}

/// `text` as a number from `min` to `max`, if it is one.
fn in_range<T: std::str::FromStr + PartialOrd>(text: &str, min: T, max: T) -> Option<T> {
    text.trim()
        .parse::<T>()
        .ok()
        .filter(|n| (min..=max).contains(n))
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
        let s = decimal_number(0.1, 3600.0, "seconds");
        assert_eq!(s("0.5"), Ok(0.5));
        for bad in ["0", "-1", "nan", "inf", "3600.5", "x"] {
            assert_eq!(s(bad), Err("expected seconds from 0.1 to 3600".to_owned()));
        }
        let count = whole_number(1, u64::MAX, "a count of values");
        assert_eq!(
            count("0"),
            Err("expected a count of values, at least 1".to_owned())
        );
    }
}
