//! Reading a settings file, or a file of Envoy rules: a regular file of at
//! most 1 MiB in UTF-8, judged before it is read.

use std::path::Path;

use super::ConfigError;

/// The most bytes a settings file (or a file of Envoy rules) may hold: far
/// above any real one.
const MAX_FILE: u64 = 1024 * 1024;

/// The text of a settings file (or a file of Envoy rules) at `path`: a
/// regular file of at most 1 MiB, in UTF-8. Anything else (a directory, a
/// device such as `/dev/zero`, a pipe, a larger file) is refused with an
/// error that names it, and never read past 1 MiB or waited on.
pub fn read_file(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    let refused = |message: String| ConfigError { origin: path.display().to_string(), line: None, key: None, message };
    let unreadable = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::InvalidData => refused("it is not UTF-8 text: save it as UTF-8".into()),
        _ => refused(format!("can't read the file: {e}")),
    };
    // Judged before it is opened: opening a pipe waits for a writer.
    let kind = std::fs::metadata(path).map_err(unreadable)?;
    if !kind.is_file() {
        return Err(refused("it is not a regular file (a directory, a device or a pipe): give a file's path".into()));
    }
    let mut text = String::new();
    let file = std::fs::File::open(path).map_err(unreadable)?;
    file.take(MAX_FILE + 1).read_to_string(&mut text).map_err(unreadable)?;
    if text.len() as u64 > MAX_FILE {
        return Err(refused(format!(
            "it is over {MAX_FILE} bytes, far more than any settings need: give the right file"
        )));
    }
    Ok(text)
}
