//! The HTML report (issue 5): a real run of a script whose file name and source are hostile
//! markup gives one well-formed, self-contained page in which nothing from the program runs.

use scraper::{Html, Selector};

use crate::fixture;

const HOSTILE: &str = "<script>alert(1)</script>";

#[test]
fn a_hostile_script_gives_a_safe_self_contained_page() {
    let dir = fixture::tempdir();
    let script = dir.join("<img src=x onerror=alert(1)>.py");
    let source = format!(
        "s = \"{HOSTILE}\"\ndata = [str(i) + s for i in range(300000)]  # {HOSTILE}\ntotal = 0\nfor i in range(3000000):\n    total += i % 7\n"
    );
    std::fs::write(&script, source).unwrap();
    let py = &fixture::pythons()[0];
    let out = fixture::mlprof()
        .args(["run", "--html", "--"])
        .arg(&py.exe)
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = String::from_utf8(out.stdout).expect("UTF-8 page");
    let doc = Html::parse_document(&page);
    assert!(
        doc.errors.is_empty(),
        "HTML5 parse errors: {:?}",
        doc.errors
    );

    // Only our two script elements: the embedded profile (JSON, never executed) and our code.
    let scripts: Vec<_> = doc.select(&Selector::parse("script").unwrap()).collect();
    assert_eq!(scripts.len(), 2);
    assert_eq!(scripts[0].value().attr("type"), Some("application/json"));
    assert!(
        !scripts[1].inner_html().contains("alert(1)"),
        "program text never in our code"
    );
    // No element from the program: no img, no event-handler attributes anywhere.
    assert_eq!(doc.select(&Selector::parse("img").unwrap()).count(), 0);
    for node in doc.select(&Selector::parse("*").unwrap()) {
        for (name, _) in node.value().attrs() {
            assert!(!name.starts_with("on"), "event handler attribute {name}");
        }
    }
    // Self-contained: nothing fetched from anywhere.
    for sel in ["[src]", "link[href]"] {
        assert_eq!(
            doc.select(&Selector::parse(sel).unwrap()).count(),
            0,
            "{sel}"
        );
    }
    assert!(!page.contains("http://") || page.contains("http://www.w3.org/2000/svg"));
    assert!(!page.contains("https://"));
    // The program's strings are there, as text.
    let header = doc
        .select(&Selector::parse("header .cmd").unwrap())
        .next()
        .unwrap();
    assert!(header
        .text()
        .collect::<String>()
        .contains("<img src=x onerror=alert(1)>.py"));
    let profile = scripts[0].inner_html();
    let parsed = fixture::check_profile(&profile.replace("&amp;", "&"));
    assert!(
        parsed.lines.iter().any(|l| l.source.contains(HOSTILE)),
        "the hostile line is in the data"
    );
}
