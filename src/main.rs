//! The `mlprof` command: parse, run, and turn any error into one line and an exit code.

fn main() {
    let code = match mlprof::cli::run(std::env::args_os()) {
        Ok(code) => code,
        Err(err) => {
            // Messages quote paths and names, some from a profiled program: cleaned of control
            // characters. A stderr that cannot be written loses the line, never panics.
            use std::io::Write as _;
            let message = err.to_string();
            let _ = writeln!(
                std::io::stderr().lock(),
                "mlprof: {}",
                mlprof::sanitize::Clean(&message)
            );
            err.exit_code()
        }
    };
    std::process::exit(code);
}
