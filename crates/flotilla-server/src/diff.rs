//! Revision diffs as the API's [`ChangeDto`]s, from the model's pure
//! `revision_diff`.

use crate::api::ChangeDto;
use flotilla_model::topology::Topology;

/// What changed from `before` to `after`, by kind (`component`, `host`, `stack`)
/// and name.
pub fn changes(before: &Topology, after: &Topology) -> Vec<ChangeDto> {
    flotilla_model::revision::revision_diff(before, after)
        .into_iter()
        .map(|c| ChangeDto {
            kind: c.kind.to_string(),
            name: c.name,
            change: c.change.to_string(),
            details: c.details,
            restarts: c.restarts,
        })
        .collect()
}
