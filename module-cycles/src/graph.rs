//! Which top-level module names which, and the circles among them.
//!
//! Circles are found per strongly connected component (Tarjan's algorithm): for each
//! module of a knot, the shortest circle through it, duplicates dropped. So a failure
//! lists every knot at once, and each import to undo, rather than the first circle a
//! search happens upon (on the exporter before it was untied: five modules in one
//! knot, four distinct shortest circles).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Edges between top-level modules, each with where it was seen first.
#[derive(Debug, Default, Clone)]
pub struct Graph {
    /// `from` -> `to` -> `file:line` of the first path that made the edge.
    edges: BTreeMap<String, BTreeMap<String, String>>,
}

impl Graph {
    /// Records that `from` names `to` at `at` (a module naming itself is no edge).
    pub fn add(&mut self, from: &str, to: &str, at: impl FnOnce() -> String) {
        if from != to {
            self.edges.entry(from.to_owned()).or_default().entry(to.to_owned()).or_insert_with(at);
        }
    }

    /// Where `from` first names `to`, if it does.
    pub fn edge(&self, from: &str, to: &str) -> Option<&str> {
        self.edges.get(from)?.get(to).map(String::as_str)
    }

    /// The modules `from` names, in name order.
    pub fn targets(&self, from: &str) -> impl Iterator<Item = &str> {
        self.edges.get(from).into_iter().flat_map(|t| t.keys().map(String::as_str))
    }

    fn nodes(&self) -> BTreeSet<&str> {
        self.edges
            .iter()
            .flat_map(|(from, to)| std::iter::once(from.as_str()).chain(to.keys().map(String::as_str)))
            .collect()
    }

    /// The shortest circle through each module that is on one, without repeats; each
    /// starts and ends at its first module by name (`a -> b -> a`), in name order.
    pub fn cycles(&self) -> Vec<Vec<String>> {
        let mut circles: Vec<Vec<String>> = Vec::new();
        for component in self.components().into_iter().filter(|c| c.len() > 1) {
            for start in &component {
                let Some(circle) = self.shortest_circle(start, &component).map(rotate_to_least) else { continue };
                if !circles.contains(&circle) {
                    circles.push(circle);
                }
            }
        }
        circles.sort();
        circles
    }

    /// A breadth-first search from `start` back to it, inside `within`.
    fn shortest_circle(&self, start: &str, within: &BTreeSet<&str>) -> Option<Vec<String>> {
        let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        while let Some(node) = queue.pop_front() {
            for next in self.targets(node).filter(|n| within.contains(n)) {
                if next == start {
                    let mut path = vec![start.to_owned(), node.to_owned()];
                    let mut at = node;
                    while at != start {
                        at = came_from[at];
                        path.push(at.to_owned());
                    }
                    path.reverse();
                    return Some(path);
                }
                if next != start && !came_from.contains_key(next) {
                    came_from.insert(next, node);
                    queue.push_back(next);
                }
            }
        }
        None
    }

    /// Strongly connected components, by Tarjan's algorithm.
    fn components(&self) -> Vec<BTreeSet<&str>> {
        let mut state = Tarjan::default();
        for node in self.nodes() {
            if !state.index.contains_key(node) {
                state.visit(self, node);
            }
        }
        state.components
    }
}

/// The same circle, started at its least module (`b -> a -> b` becomes `a -> b -> a`).
fn rotate_to_least(mut circle: Vec<String>) -> Vec<String> {
    circle.pop();
    let least = circle.iter().enumerate().min_by(|a, b| a.1.cmp(b.1)).map_or(0, |(i, _)| i);
    circle.rotate_left(least);
    if let Some(first) = circle.first().cloned() {
        circle.push(first);
    }
    circle
}

#[derive(Default)]
struct Tarjan<'g> {
    next: usize,
    index: BTreeMap<&'g str, usize>,
    low: BTreeMap<&'g str, usize>,
    stack: Vec<&'g str>,
    on_stack: BTreeSet<&'g str>,
    components: Vec<BTreeSet<&'g str>>,
}

impl<'g> Tarjan<'g> {
    // Recursive: a crate has tens of top-level modules, far from any stack limit.
    fn visit(&mut self, graph: &'g Graph, node: &'g str) {
        self.index.insert(node, self.next);
        self.low.insert(node, self.next);
        self.next += 1;
        self.stack.push(node);
        self.on_stack.insert(node);
        for next in graph.targets(node) {
            if !self.index.contains_key(next) {
                self.visit(graph, next);
                let low = self.low[node].min(self.low[next]);
                self.low.insert(node, low);
            } else if self.on_stack.contains(next) {
                let low = self.low[node].min(self.index[next]);
                self.low.insert(node, low);
            }
        }
        if self.low[node] == self.index[node] {
            let mut component = BTreeSet::new();
            while let Some(member) = self.stack.pop() {
                self.on_stack.remove(member);
                component.insert(member);
                if member == node {
                    break;
                }
            }
            self.components.push(component);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &str)]) -> Graph {
        let mut g = Graph::default();
        for (from, to) in edges {
            g.add(from, to, || format!("{from}.rs:1"));
        }
        g
    }

    #[test]
    fn a_chain_and_a_diamond_have_no_circle() {
        assert!(graph(&[("a", "b"), ("b", "c"), ("a", "c"), ("d", "b")]).cycles().is_empty());
        assert!(graph(&[("a", "a")]).cycles().is_empty(), "a module naming itself is no edge");
    }

    #[test]
    fn each_module_of_a_knot_gets_its_shortest_circle_once() {
        let g = graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("b", "a"), ("x", "y"), ("y", "x"), ("c", "x")]);
        assert_eq!(g.cycles(), [vec!["a", "b", "a"], vec!["a", "b", "c", "a"], vec!["x", "y", "x"]]);
        let long = graph(&[("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]);
        assert_eq!(long.cycles(), [["a", "b", "c", "d", "a"]]);
        assert_eq!(long.edge("c", "d"), Some("c.rs:1"));
    }
}
