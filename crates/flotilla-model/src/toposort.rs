//! Kahn's algorithm, the one topological sort of the crate: validation's cycle check
//! and [`crate::topology::Topology::from_snapshot`] both order components with it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A topological order of the nodes `0..n` under `edges`, each `(before, after)`
/// meaning `before` must come first (a dependency before its dependent). Among the
/// nodes ready at each point, the smallest index goes first: where nodes are indexed
/// in name order (components are), ties are broken by name. Repeated edges are
/// allowed.
///
/// # Errors
/// When the edges have a cycle: the nodes left unordered, ascending — every node on a
/// cycle and every node that (transitively) comes after one.
///
/// # Panics
/// If an edge names a node `>= n`.
pub(crate) fn topo_order(
    n: usize,
    edges: impl IntoIterator<Item = (usize, usize)>,
) -> Result<Vec<usize>, Vec<usize>> {
    let mut indegree = vec![0usize; n];
    let mut after: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (b, a) in edges {
        indegree[a] += 1;
        after[b].push(a);
    }
    let mut ready: BinaryHeap<Reverse<usize>> =
        (0..n).filter(|&i| indegree[i] == 0).map(Reverse).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(Reverse(i)) = ready.pop() {
        order.push(i);
        for &k in &after[i] {
            indegree[k] -= 1;
            if indegree[k] == 0 {
                ready.push(Reverse(k));
            }
        }
    }
    if order.len() == n {
        Ok(order)
    } else {
        Err((0..n).filter(|&i| indegree[i] > 0).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::topo_order;

    #[test]
    fn dependencies_first_ties_by_index() {
        // 3 → 1, 0 → 1 (1 depends on 3 and 0); 2 is free.
        assert_eq!(topo_order(4, [(3, 1), (0, 1)]), Ok(vec![0, 2, 3, 1]));
        assert_eq!(topo_order(0, []), Ok(vec![]));
        // Repeated edges count once each and still resolve.
        assert_eq!(topo_order(2, [(1, 0), (1, 0)]), Ok(vec![1, 0]));
    }

    #[test]
    fn a_cycle_leaves_its_nodes_and_what_follows_them() {
        // 1 ⇄ 2, 3 after 2, 0 free.
        assert_eq!(topo_order(4, [(1, 2), (2, 1), (2, 3)]), Err(vec![1, 2, 3]));
        assert_eq!(topo_order(1, [(0, 0)]), Err(vec![0]));
    }
}
