//! The gateway's top-level modules form layers: no dependency cycle between them, counted from
//! the `crate::X` paths their source names (comments and test code left out). A failure prints
//! the modules of each cycle with what each of them uses, to see which use to move.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A test file (`tests.rs`, `bundle_tests.rs`): not part of the layering.
fn is_test_file(path: &Path) -> bool {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    stem.split('_').any(|w| w == "tests")
}

/// The source without comment lines and without a trailing `#[cfg(test)] mod tests { .. }`.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names after each `crate::` in `code`.
fn crate_paths(code: &str) -> BTreeSet<String> {
    code.match_indices("crate::")
        .map(|(i, m)| {
            code[i + m.len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect::<String>()
        })
        .filter(|name| !name.is_empty())
        .collect()
}

/// Each top-level module of `src` and the other top-level modules it uses.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap().flatten() {
        let path = entry.path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            sources(&path, files.entry(name).or_default());
        } else if path.extension().is_some_and(|e| e == "rs") && name != "lib" && name != "main" {
            files.entry(name).or_default().push(path);
        }
    }
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    files
        .iter()
        .map(|(module, paths)| {
            let mut uses = BTreeSet::new();
            for path in paths.iter().filter(|p| !is_test_file(p)) {
                let text = std::fs::read_to_string(path).unwrap();
                uses.extend(
                    crate_paths(&code(&text))
                        .into_iter()
                        .filter(|d| d != module && modules.contains(d)),
                );
            }
            (module.clone(), uses)
        })
        .collect()
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            for w in &self.graph[v] {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    component.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

#[test]
fn the_gateways_top_level_modules_have_no_dependency_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    assert!(graph.len() > 20, "found only {} modules", graph.len());
    let found = cycles(&graph);
    let report: Vec<String> = found
        .iter()
        .flat_map(|c| {
            c.iter()
                .map(|m| format!("  {m} -> {:?}", graph[m].iter().collect::<Vec<_>>()))
                .chain(std::iter::once(String::new()))
        })
        .collect();
    assert!(
        found.is_empty(),
        "{} cycle(s) between the gateway's top-level modules:\n{}",
        found.len(),
        report.join("\n")
    );
}

#[test]
fn a_cycle_is_found_and_a_layering_is_not() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry((*a).into()).or_default().insert((*b).into());
            g.entry((*b).into()).or_default();
        }
        g
    };
    let layered = graph(&[("routes", "node"), ("node", "call"), ("routes", "call")]);
    assert!(cycles(&layered).is_empty());
    let circle = graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]);
    assert_eq!(cycles(&circle), vec![vec!["a", "b", "c"]]);
    assert_eq!(
        crate_paths("use crate::node::Live;\nlet x = crate::call::Call;"),
        ["call", "node"].map(String::from).into()
    );
    assert!(crate_paths(&code("// crate::node\nfn f() {}")).is_empty());
}
