//! Reading a service's configuration file: a regular file of bounded size, read without waiting.
//!
//! A config path is typed by people. One that names a FIFO would block `open` until someone
//! writes it (and a service blocked in `open` never reaches its signal loop, so SIGTERM no longer
//! stops it); one that names `/dev/zero` or a runaway file would be read until memory runs out.
//! Both are refused here with an error that says why.

use std::fs::OpenOptions;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Largest configuration file a service reads: far above any real robot's (a manager file
/// with the most controllers an arbiter follows is a few KiB).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The text of the configuration file at `path`.
pub fn read_config(path: &Path) -> io::Result<String> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a configuration is a TOML file)",
        ));
    }
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "larger than {} KiB, more than any configuration needs",
                MAX_CONFIG_BYTES >> 10
            ),
        ));
    }
    Ok(text)
}

/// Longest line of a parse error kept for the log: the TOML parser quotes the offending line
/// and whatever value it names, which a file of one long line makes a megabyte per reload.
const ERROR_LINE_CHARS: usize = 200;

/// A parse error of a configuration file as it goes to the log and the terminal: control
/// characters (from the file) escaped, so that they cannot rewrite the line or the terminal,
/// and each line cut to `ERROR_LINE_CHARS` characters, saying how many more there were.
pub fn config_error_text(error: &str) -> String {
    let line = |l: &str| {
        let mut out: String = l
            .chars()
            .take(ERROR_LINE_CHARS)
            .map(|c| match c {
                '\t' => c.to_string(),
                c if c.is_control() => c.escape_unicode().to_string(),
                c => c.to_string(),
            })
            .collect();
        let more = l.chars().count().saturating_sub(ERROR_LINE_CHARS);
        if more > 0 {
            out.push_str(&format!("... ({more} more characters)"));
        }
        out
    };
    error.split('\n').map(line).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_are_cut_and_escaped_for_the_log() {
        let long = format!("unlisted = \"{}\"", "x".repeat(1000));
        let text = config_error_text(&format!("line 3\n{long}\n\u{1b}[2J"));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "line 3");
        assert!(
            lines[1].starts_with("unlisted = \"xxx")
                && lines[1].ends_with("... (813 more characters)"),
            "{}",
            lines[1]
        );
        assert_eq!(lines[2], "\\u{1b}[2J");
    }

    #[test]
    fn a_fifo_a_device_and_an_oversized_file_are_refused_a_toml_file_is_read() {
        let dir = std::env::temp_dir().join(format!("baton-config-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo.toml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = read_config(&fifo).expect_err("a FIFO");
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let err = read_config(Path::new("/dev/zero")).expect_err("a device");
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let big = dir.join("big.toml");
        std::fs::write(&big, vec![b'#'; MAX_CONFIG_BYTES as usize + 1]).unwrap();
        let err = read_config(&big).expect_err("too large");
        assert!(err.to_string().contains("larger than 1024 KiB"), "{err}");
        let fine = dir.join("fine.toml");
        std::fs::write(&fine, "name = \"arm\"\n").unwrap();
        assert_eq!(read_config(&fine).unwrap(), "name = \"arm\"\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
