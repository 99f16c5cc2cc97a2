//! What lines are charged with: which source files are "profiled" (the user's code by default,
//! not the standard library, not installed packages; `--profile-all` takes everything,
//! `--profile-only` given patterns), and whose waiting counts (`--idle`, see `idle.rs`).

/// The attribution filter of a run.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Attribute to any file.
    pub all: bool,
    /// If not empty: only files whose path contains one of these.
    pub only: Vec<String>,
    /// Count every thread's waiting on lines (`--idle`), not only the main thread's and that
    /// of threads it waits for (see `idle.rs`).
    pub idle: bool,
}

impl Filter {
    /// Whether samples may be attributed to `file`.
    pub fn profiles(&self, file: &str) -> bool {
        if is_mlprof_hook(file) {
            return false; // not even with --profile-all: it is not the program's code
        }
        if !self.only.is_empty() {
            return self.only.iter().any(|p| file.contains(p.as_str()));
        }
        self.all || !is_library(file)
    }
}

/// The Python code mlprof's preload library runs in a process that imports `torch`
/// (docs/design/gpu-tensors.md): never a line of the program, nor a frame of its stacks.
pub fn is_mlprof_hook(file: &str) -> bool {
    mlprof_wire::TENSOR_HOOK_FILE.to_str() == Ok(file)
}

/// The standard library, frozen modules, installed packages, and code a library generates
/// into its cache (torch.compile's inductor writes its kernels' Python wrappers under
/// `torchinductor_USER/`): what they cost is the cost of the user line that compiled them.
fn is_library(file: &str) -> bool {
    if file.starts_with("<frozen ") {
        return true;
    }
    if file.split('/').any(|dir| dir.starts_with("torchinductor_")) {
        return true;
    }
    if file.contains("/site-packages/") || file.contains("/dist-packages/") {
        return true;
    }
    // The standard library: .../lib/python3.X/... (and lib64).
    file.split('/')
        .collect::<Vec<_>>()
        .windows(2)
        .any(|w| (w[0] == "lib" || w[0] == "lib64") && w[1].starts_with("python3"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_code_is_profiled_and_libraries_are_not() {
        let f = Filter::default();
        assert!(f.profiles("/home/me/train.py"));
        assert!(f.profiles("<string>"));
        assert!(!f.profiles("/usr/lib/python3.11/threading.py"));
        assert!(!f.profiles("/root/.pyenv/versions/3.9.18/lib/python3.9/json/decoder.py"));
        assert!(!f.profiles("/venv/lib/python3.12/site-packages/numpy/core/numeric.py"));
        assert!(!f.profiles("/tmp/torchinductor_ana/kt/cktreaotpjatue3xqymqz5.py"));
        assert!(!f.profiles("<frozen importlib._bootstrap>"));
        assert!(!f.profiles("<mlprof gpu trace>"));
        let all = Filter {
            all: true,
            ..Filter::default()
        };
        assert!(!all.profiles("<mlprof gpu trace>"));
        assert!(Filter {
            all: true,
            ..Filter::default()
        }
        .profiles("<frozen importlib._bootstrap>"));
        let only = Filter {
            only: vec!["numpy/".into()],
            ..Filter::default()
        };
        assert!(only.profiles("/venv/lib/python3.12/site-packages/numpy/core/numeric.py"));
        assert!(!only.profiles("/home/me/train.py"));
    }
}
