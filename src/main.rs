//! The `mlprof` command: parse, run, and turn any error into one line and an exit code.

fn main() {
    let code = match mlprof::cli::run(std::env::args_os()) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("mlprof: {err}");
            err.exit_code()
        }
    };
    std::process::exit(code);
}
