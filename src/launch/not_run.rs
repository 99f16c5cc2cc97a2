//! Why a command could not start, said so that a person can fix it: `mlprof run -- train.py`
//! names a script that is here but is no command (`python3 train.py`?), a script without its
//! execute bit or `#!` line, an interpreter its `#!` line names that does not exist. Reads at
//! most the first bytes of a regular file the user named as the command; never runs anything.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::error::{Error, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND};

/// The one-line error for `program` failing to start with `err`, and its exit code (127 not
/// found, 126 otherwise, as a shell).
pub(super) fn error(program: &OsStr, err: &std::io::Error) -> Error {
    let name = program.to_string_lossy();
    let code = match err.kind() {
        std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
        _ => EXIT_NOT_EXECUTABLE,
    };
    Error::with_code(
        format!("cannot run '{name}': {}", reason(program, err)),
        code,
    )
}

/// Refuse, before starting it, an executable Python script named by its path that has no `#!`
/// line: the system would hand it to `/bin/sh`, which fails on its first line of Python.
pub(super) fn check(program: &OsStr) -> Result<(), Error> {
    let path = Path::new(program);
    let executable =
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if !program.as_bytes().contains(&b'/') || !executable {
        return Ok(());
    }
    let head = head(path);
    if is_python(path, &head) && !head.starts_with(b"#!") {
        return Err(Error::with_code(
            format!(
                "cannot run '{}': it has no #! line, so the system would run it with /bin/sh; \
                 did you mean '{} {}'?",
                program.to_string_lossy(),
                python_command(),
                program.to_string_lossy()
            ),
            EXIT_NOT_EXECUTABLE,
        ));
    }
    Ok(())
}

/// What went wrong, with what to do where it can be told.
fn reason(program: &OsStr, err: &std::io::Error) -> String {
    let path = Path::new(program);
    let searched = !program.as_bytes().contains(&b'/');
    // Only a regular file is looked at (a FIFO could block the open).
    let file = std::fs::metadata(path).ok().filter(|m| m.is_file());
    let head = file.as_ref().map(|_| head(path)).unwrap_or_default();
    let python = file.is_some() && is_python(path, &head);
    let instead = || {
        let shown = program.to_string_lossy();
        format!("; did you mean '{} {shown}'?", python_command())
    };
    match (err.kind(), err.raw_os_error(), &file) {
        (std::io::ErrorKind::NotFound, _, Some(meta)) if searched => {
            let hint = if python {
                instead()
            } else if meta.permissions().mode() & 0o111 != 0 {
                format!("; did you mean './{}'?", program.to_string_lossy())
            } else {
                String::new()
            };
            format!("not a command on PATH (a name without '/' is looked up there){hint}")
        }
        (std::io::ErrorKind::NotFound, _, Some(_)) => match interpreter(&head) {
            Some(interp) => {
                let hint = if python { instead() } else { String::new() };
                format!("its #! line names {interp}, which does not exist{hint}")
            }
            None => "No such file or directory".to_string(),
        },
        (std::io::ErrorKind::PermissionDenied, _, Some(meta))
            if meta.permissions().mode() & 0o111 == 0 =>
        {
            let hint = if python {
                instead()
            } else {
                format!(" (chmod +x {})", program.to_string_lossy())
            };
            format!("Permission denied: the file is not executable{hint}")
        }
        (_, Some(libc::ENOEXEC), Some(_)) => {
            let hint = if python { instead() } else { String::new() };
            format!("not a program the system can start (no #! line){hint}")
        }
        (std::io::ErrorKind::NotFound, ..) => "No such file or directory".to_string(),
        (std::io::ErrorKind::PermissionDenied, ..) => "Permission denied".to_string(),
        _ => err.to_string(),
    }
}

/// The first bytes of a file (its `#!` line, if any); empty if it cannot be read.
fn head(path: &Path) -> Vec<u8> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut buf = Vec::new();
    if let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    {
        let _ = f.take(256).read_to_end(&mut buf);
    }
    buf
}

/// The interpreter a `#!` line names.
fn interpreter(head: &[u8]) -> Option<String> {
    let line = head.strip_prefix(b"#!")?;
    let line = line.split(|&b| b == b'\n').next()?;
    let text = String::from_utf8_lossy(line);
    let interp = text.split_whitespace().next()?;
    Some(crate::sanitize::clean(interp).into_owned())
}

/// A Python script: named `.py`/`.pyw`, or its `#!` line runs Python (`/usr/bin/env python3`).
fn is_python(path: &Path, head: &[u8]) -> bool {
    let named = path.extension().is_some_and(|e| e == "py" || e == "pyw");
    let shebang = head
        .strip_prefix(b"#!")
        .and_then(|l| l.split(|&b| b == b'\n').next());
    named || shebang.is_some_and(|l| l.windows(6).any(|w| w == b"python"))
}

/// How to run Python here: `python` where PATH has it (as people type it), else `python3`.
fn python_command() -> &'static str {
    let on_path = |name: &str| {
        std::env::var_os("PATH").is_some_and(|path| {
            std::env::split_paths(&path).any(|dir| {
                std::fs::metadata(dir.join(name))
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
        })
    };
    if on_path("python") || !on_path("python3") {
        "python"
    } else {
        "python3"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str, text: &str, mode: u32) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("mlprof-not-run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    fn os_error(code: i32) -> std::io::Error {
        std::io::Error::from_raw_os_error(code)
    }

    #[test]
    fn a_script_that_is_no_command_is_told_how_to_run() {
        let script = temp("train.py", "print(1)\n", 0o644);
        let err = error(script.as_os_str(), &os_error(libc::EACCES));
        assert_eq!(err.exit_code(), EXIT_NOT_EXECUTABLE);
        let text = err.to_string();
        assert!(text.contains("not executable"), "{text}");
        assert!(
            text.ends_with(&format!(
                "did you mean '{} {}'?",
                python_command(),
                script.display()
            )),
            "{text}"
        );

        let tool = temp("tool", "echo\n", 0o644);
        let text = error(tool.as_os_str(), &os_error(libc::EACCES)).to_string();
        assert!(
            text.ends_with(&format!("(chmod +x {})", tool.display())),
            "{text}"
        );

        let bare = temp("bare.py", "print(1)\n", 0o755);
        let text = error(bare.as_os_str(), &os_error(libc::ENOEXEC)).to_string();
        assert!(
            text.contains("no #! line") && text.contains("did you mean"),
            "{text}"
        );
        let refused = check(bare.as_os_str()).unwrap_err();
        assert_eq!(refused.exit_code(), EXIT_NOT_EXECUTABLE);
        assert!(refused.to_string().contains("/bin/sh"), "{refused}");
        let with_line = temp("ok.py", "#!/usr/bin/env python3\nprint(1)\n", 0o755);
        assert!(check(with_line.as_os_str()).is_ok());
        assert!(
            check(OsStr::new("bare.py")).is_ok(),
            "looked up on PATH: not ours to check"
        );

        let lost = temp("lost", "#!/nonexistent/python9 -u\nprint(1)\n", 0o755);
        let err = error(lost.as_os_str(), &os_error(libc::ENOENT));
        assert_eq!(err.exit_code(), EXIT_NOT_FOUND);
        let text = err.to_string();
        assert!(
            text.contains("its #! line names /nonexistent/python9, which does not exist"),
            "{text}"
        );
        assert!(text.contains("did you mean"), "a Python script: {text}");

        let missing = error(OsStr::new("/nonexistent/x"), &os_error(libc::ENOENT));
        assert_eq!(
            missing.to_string(),
            "cannot run '/nonexistent/x': No such file or directory"
        );
        let _ = std::fs::remove_dir_all(script.parent().unwrap());
    }
}
