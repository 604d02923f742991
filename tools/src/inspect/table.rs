//! Aligned text tables and the number formats `bus-inspect` prints (ages, rates, byte counts).

use std::fmt::Write;

/// How a column is aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A table: a header and rows of cells, printed with each column as wide as its widest cell.
pub struct Table {
    columns: Vec<(String, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(columns: &[(&str, Align)]) -> Table {
        Table {
            columns: columns
                .iter()
                .map(|(name, align)| ((*name).to_owned(), *align))
                .collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are empty, extra cells are ignored.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row after the header, no trailing spaces.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.columns.iter().map(|(n, _)| width(n)).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(width(cell));
            }
        }
        let mut out = String::new();
        let header: Vec<String> = self.columns.iter().map(|(n, _)| n.clone()).collect();
        for cells in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, ((_, align), w)) in self.columns.iter().zip(&widths).enumerate() {
                let cell = cells.get(i).map_or("", String::as_str);
                let pad = w - width(cell);
                if i > 0 {
                    line.push_str("  ");
                }
                match align {
                    Align::Left => {
                        line.push_str(cell);
                        line.push_str(&" ".repeat(pad));
                    }
                    Align::Right => {
                        line.push_str(&" ".repeat(pad));
                        line.push_str(cell);
                    }
                }
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
        out
    }
}

/// Display width: characters, not bytes (names are ASCII; "…" and "µ" are one column).
fn width(s: &str) -> usize {
    s.chars().count()
}

/// Seconds as a short age: `850ms`, `2.4s`, `3m12s`, `5h03m`; `-` for none.
pub fn age(seconds: Option<f64>) -> String {
    let Some(s) = seconds else {
        return "-".into();
    };
    if s < 1.0 {
        format!("{:.0}ms", s * 1000.0)
    } else if s < 60.0 {
        format!("{s:.1}s")
    } else if s < 3600.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!(
            "{}h{:02}m",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    }
}

/// A rate in Hz with three significant digits; `-` for none.
pub fn hz(rate: Option<f64>) -> String {
    match rate {
        None => "-".into(),
        Some(r) if r >= 100.0 => format!("{r:.0}Hz"),
        Some(r) if r >= 10.0 => format!("{r:.1}Hz"),
        Some(r) => format!("{r:.2}Hz"),
    }
}

/// A byte count with a binary unit: `512B`, `4.0KiB`, `1.5MiB`.
pub fn bytes(n: f64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024.0 {
        return format!("{n:.0}B");
    }
    let mut v = n / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1}{}", UNITS[unit])
}

/// A duration given in milliseconds, three significant digits (µs below a millisecond).
pub fn ms(v: f64) -> String {
    if v < 1.0 {
        format!("{:.1}µs", v * 1000.0)
    } else if v >= 100.0 {
        format!("{v:.0}ms")
    } else if v >= 10.0 {
        format!("{v:.1}ms")
    } else {
        format!("{v:.2}ms")
    }
}

/// Cuts a long type path from the left, keeping its end (the type's own name).
pub fn short_type(t: &str, max: usize) -> String {
    let n = t.chars().count();
    if n <= max {
        t.to_owned()
    } else {
        let tail: String = t.chars().skip(n - (max - 1)).collect();
        format!("…{tail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align() {
        let mut t = Table::new(&[("NAME", Align::Left), ("N", Align::Right)]);
        t.row(vec!["/a".into(), "1".into()]);
        t.row(vec!["/long/name".into(), "123".into()]);
        let text = t.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "NAME          N");
        assert_eq!(lines[1], "/a            1");
        assert_eq!(lines[2], "/long/name  123");
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(age(Some(0.25)), "250ms");
        assert_eq!(age(Some(75.0)), "1m15s");
        assert_eq!(hz(Some(99.61)), "99.6Hz");
        assert_eq!(bytes(1536.0), "1.5KiB");
        assert_eq!(ms(0.0123), "12.3µs");
        assert_eq!(ms(10.04), "10.0ms");
        assert_eq!(short_type("a::b::Cdef", 6), "…:Cdef");
    }
}
