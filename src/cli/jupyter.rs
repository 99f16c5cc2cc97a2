//! `mlprof jupyter install`: a Jupyter kernel spec whose kernel runs under `mlprof run`, so
//! that `%%mlprof` (the Python package's cell magic) sees every allocation from the kernel's
//! start.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// Where and how to install the kernel spec.
pub struct Install {
    /// Into the user's Jupyter data directory instead of the Python environment's.
    pub user: bool,
    /// The kernel's directory name.
    pub name: String,
    /// The name Jupyter shows.
    pub display_name: String,
    /// The Python that runs the kernel (`None`: the one beside this executable, else
    /// `python3` on `PATH`).
    pub python: Option<PathBuf>,
}

/// Write `<kernels>/<name>/kernel.json`; returns the directory.
pub fn install(args: &Install) -> Result<PathBuf> {
    if !kernel_name(&args.name) {
        return Err(Error::with_code(
            format!(
                "--name {}: a kernel name is letters, digits, '.', '-' and '_', with at least \
                 one letter or digit",
                crate::sanitize::Clean(&args.name)
            ),
            crate::error::EXIT_USAGE,
        ));
    }
    let python = python(args.python.as_deref())?;
    let prefix = kernel_prefix(&python)?;
    let kernels = if args.user {
        user_data_dir()?.join("kernels")
    } else {
        prefix.join("share/jupyter/kernels")
    };
    let dir = kernels.join(&args.name);
    let mlprof = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .map_err(|e| Error::new(format!("cannot tell where this mlprof is: {e}")))?;
    let spec = serde_json::json!({
        "argv": [
            mlprof.display().to_string(), "run", "--quiet", "--",
            python.display().to_string(), "-m", "ipykernel_launcher", "-f", "{connection_file}"
        ],
        "display_name": args.display_name,
        "language": "python",
        "metadata": { "debugger": false },
    });
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::new(format!("cannot create {}: {e}", dir.display())))?;
    let path = dir.join("kernel.json");
    let text = serde_json::to_string_pretty(&spec).map_err(|e| Error::new(e.to_string()))?;
    // 0600, replacing (never writing through) a link planted at its name.
    super::regions::write_private(&path, (text + "\n").as_bytes())
        .map_err(|e| Error::new(format!("cannot write {}: {e}", path.display())))?;
    Ok(dir)
}

/// Whether `name` may name the kernel's directory: letters, digits, `.`, `-` and `_` only,
/// with a letter or digit among them (so never `.` or `..`), at most 64 characters, and not
/// starting with `-` or `.` (an option, a hidden directory).
fn kernel_name(name: &str) -> bool {
    name.len() <= 64
        && name.chars().any(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        && !name.starts_with(['-', '.'])
}

/// The Python to run the kernel with, as an absolute path.
fn python(given: Option<&Path>) -> Result<PathBuf> {
    let candidates: Vec<PathBuf> = match given {
        Some(p) => vec![p.to_path_buf()],
        None => {
            let beside = std::env::current_exe()
                .ok()
                .and_then(|e| e.parent().map(Path::to_path_buf));
            let mut all: Vec<PathBuf> = ["python3", "python"]
                .iter()
                .filter_map(|n| beside.as_ref().map(|d| d.join(n)))
                .collect();
            all.extend(
                std::env::var_os("PATH")
                    .map(|p| {
                        std::env::split_paths(&p)
                            .map(|d| d.join("python3"))
                            .collect::<Vec<PathBuf>>()
                    })
                    .unwrap_or_default(),
            );
            all
        }
    };
    for c in &candidates {
        if c.is_file() {
            // Not canonicalized: a venv's `bin/python` is a link whose own path selects the
            // venv.
            return std::path::absolute(c).map_err(|e| Error::new(e.to_string()));
        }
    }
    Err(Error::new(match given {
        Some(p) => format!("--python {}: no such file", p.display()),
        None => "no Python found beside mlprof or on PATH (name one with --python)".to_string(),
    }))
}

/// What the Python is asked: its prefix, once ipykernel imports. Outside a virtual environment
/// the user's site-packages (where `pip install --user ipykernel` puts it, and where the kernel
/// will find it) is added back by hand, as `-I` leaves it out.
const PROBE: &str = "import sys\n\
    try:\n\
    \x20   import site\n\
    \x20   if sys.prefix == getattr(sys, 'base_prefix', sys.prefix):\n\
    \x20       u = site.getusersitepackages()\n\
    \x20       if isinstance(u, str): sys.path.append(u)\n\
    except Exception:\n\
    \x20   pass\n\
    import ipykernel\n\
    print(sys.prefix)";

/// The Python's `sys.prefix`, checking that it can run ipykernel. In isolated mode (`-I`):
/// neither the working directory (an `ipykernel.py` planted there) nor `PYTHON*` variables
/// choose what this runs.
fn kernel_prefix(python: &Path) -> Result<PathBuf> {
    let out = Command::new(python)
        .args(["-I", "-c", PROBE])
        .output()
        .map_err(|e| Error::new(format!("cannot run {}: {e}", python.display())))?;
    if !out.status.success() {
        return Err(Error::new(format!(
            "{} cannot run a Jupyter kernel: ipykernel is not installed there (`{} -m pip \
             install ipykernel`)",
            python.display(),
            python.display()
        )));
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    ))
}

/// Jupyter's user data directory: `$JUPYTER_DATA_DIR`, else `$XDG_DATA_HOME/jupyter`, else
/// `~/.local/share/jupyter`.
fn user_data_dir() -> Result<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("JUPYTER_DATA_DIR") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = var("XDG_DATA_HOME") {
        return Ok(PathBuf::from(dir).join("jupyter"));
    }
    var("HOME")
        .map(|h| PathBuf::from(h).join(".local/share/jupyter"))
        .ok_or_else(|| Error::new("no HOME to put the user's kernel in (use it without --user)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_are_plain_directory_names() {
        for good in ["mlprof", "py3.11-mlprof", "a", "x_y"] {
            assert!(kernel_name(good), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "...",
            "-",
            "_",
            "--",
            ".hidden",
            "-rf",
            "a/b",
            "../x",
            "a b",
            "k\x1b[2J",
            "k\u{202e}",
            "é",
        ] {
            assert!(!kernel_name(bad), "{bad:?}");
        }
        assert!(!kernel_name(&"k".repeat(65)));
    }
}
