//! What a recommendation saves, in dollars, with the price table `kubectl gpu cost` uses.
//!
//! - A device costs its **fraction** of its GPU's price ([`crate::prices`]): a whole
//!   GPU 1; a MIG profile the larger of its compute share (of 7) and its memory share
//!   (of 8), since that is how much of the GPU it blocks (1g.20gb is max(1/7, 2/8) = 1/4,
//!   3g.40gb max(3/7, 4/8) = 1/2); a time-slice share its fraction (1/4).
//!   `kubectl gpu cost` charges a MIG instance its compute share alone (what it
//!   allocates); rightsizing charges what the profile keeps others from using, which is
//!   what moving to it frees.
//! - A workload's cost is that times its pods. Saved is current less recommended;
//!   a workload that outgrew its device adds cost, reported apart ([`Totals::added_per_hour`]).
//! - A month is 730 hours (8760 / 12): `kubectl gpu cost` prints per hour only, and the
//!   cloud price lists that quote monthly figures use 730.
//! - A model the table does not price leaves the workload unpriced: counted, never zero.

use super::recommend::{Recommendation, Verdict};
use crate::prices::PriceTable;

/// Hours in a month.
pub const HOURS_PER_MONTH: f64 = 730.0;

/// One workload's cost now and after the recommendation, dollars per hour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Saving {
    pub current_per_hour: f64,
    pub target_per_hour: f64,
}

impl Saving {
    /// Positive when the recommendation saves, negative when it adds.
    pub fn saved_per_hour(&self) -> f64 {
        self.current_per_hour - self.target_per_hour
    }

    pub fn saved_per_month(&self) -> f64 {
        self.saved_per_hour() * HOURS_PER_MONTH
    }
}

/// Prices a recommendation for `pods` pods on a GPU model called `model_name` (the NVML
/// name the price table matches); `None` when the table has no price for it.
pub fn saving(recommendation: &Recommendation, model_name: &str, pods: u32, table: &PriceTable) -> Option<Saving> {
    let price = table.price(model_name)?;
    let pods = f64::from(pods);
    Some(Saving {
        current_per_hour: recommendation.current.fraction() * price * pods,
        target_per_hour: recommendation.target().fraction() * price * pods,
    })
}

/// The sums over workloads.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    /// What the priced workloads cost now.
    pub allocated_per_hour: f64,
    /// Saved by the moves.
    pub saved_per_hour: f64,
    /// The part of `saved_per_hour` whose recommendation carries a warning.
    pub uncertain_saved_per_hour: f64,
    /// Added by the workloads that outgrew their device.
    pub added_per_hour: f64,
    /// Workloads left out of every sum for want of a price.
    pub unpriced: usize,
}

impl Totals {
    pub fn add(&mut self, recommendation: &Recommendation, saving: Option<Saving>) {
        let Some(s) = saving else {
            self.unpriced += 1;
            return;
        };
        self.allocated_per_hour += s.current_per_hour;
        match recommendation.verdict {
            Verdict::Move(_) => {
                self.saved_per_hour += s.saved_per_hour();
                if !recommendation.is_certain() {
                    self.uncertain_saved_per_hour += s.saved_per_hour();
                }
            }
            Verdict::Outgrew { .. } => self.added_per_hour -= s.saved_per_hour(),
            Verdict::Keep | Verdict::Unknown => {}
        }
    }

    pub fn saved_per_month(&self) -> f64 {
        self.saved_per_hour * HOURS_PER_MONTH
    }

    /// Saved as a share of what is allocated (0 to 1); `None` when nothing priced is.
    pub fn saved_share(&self) -> Option<f64> {
        (self.allocated_per_hour > 0.0).then(|| self.saved_per_hour / self.allocated_per_hour)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rightsize::recommend::tests::observed;
    use crate::rightsize::recommend::{Holding, Rules, recommend};

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn savings_by_hand() {
        let table = PriceTable::defaults().unwrap();
        let rules = Rules::default();
        let a100 = "NVIDIA A100-SXM4-80GB";
        // A whole A100 ($3.50/h) to 1g.20gb (1/4: $0.875/h): $2.625/h, $1916.25/month.
        let whole = recommend(&observed(a100, Holding::Whole, 14.0, Some(12.0)), &rules).unwrap();
        let s = saving(&whole, a100, 1, &table).unwrap();
        assert!(close(s.current_per_hour, 3.5) && close(s.target_per_hour, 0.875), "{s:?}");
        assert!(close(s.saved_per_hour(), 2.625) && close(s.saved_per_month(), 1916.25));
        // The 70B pod keeps its 3g.40gb: 1/2 of $3.50, nothing saved.
        let llm = recommend(&observed(a100, Holding::Mig("3g.40gb".into()), 35.0, Some(40.0)), &rules).unwrap();
        let keep = saving(&llm, a100, 1, &table).unwrap();
        assert!(close(keep.current_per_hour, 1.75) && close(keep.saved_per_hour(), 0.0));
        // Eight L40S pool pods from 1/4 to 1/8 of $1.50: 8 × (0.375 − 0.1875) = $1.50/h.
        let pool = recommend(&observed("NVIDIA L40S", Holding::TimeSlice { pods_per_gpu: 4 }, 4.0, Some(8.0)), &rules)
            .unwrap();
        let p = saving(&pool, "NVIDIA L40S", 8, &table).unwrap();
        assert!(close(p.current_per_hour, 3.0) && close(p.saved_per_hour(), 1.5), "{p:?}");
        // An H100 1g.10gb that outgrew it, to 1g.20gb: 1/7 → 1/4 of $4.50 adds $0.482/h.
        let full =
            recommend(&observed("NVIDIA H100 80GB HBM3", Holding::Mig("1g.10gb".into()), 9.2, Some(50.0)), &rules)
                .unwrap();
        let f = saving(&full, "NVIDIA H100 80GB HBM3", 1, &table).unwrap();
        // A V100: no price in the table.
        let v100 = recommend(&observed("Tesla V100-SXM2-32GB", Holding::Whole, 10.0, Some(20.0)), &rules).unwrap();
        assert_eq!(saving(&v100, "Tesla V100-SXM2-32GB", 1, &table), None);

        let mut totals = Totals::default();
        for (r, s) in [(&whole, Some(s)), (&llm, Some(keep)), (&pool, Some(p)), (&full, Some(f)), (&v100, None)] {
            totals.add(r, s);
        }
        // Allocated 3.5 + 1.75 + 3 + 4.5/7; saved 2.625 + 1.5 = 4.125.
        assert!(close(totals.allocated_per_hour, 8.25 + 4.5 / 7.0), "{totals:?}");
        assert!(close(totals.saved_per_hour, 4.125));
        assert!(close(totals.saved_per_month(), 4.125 * 730.0));
        assert!(close(totals.added_per_hour, 4.5 / 4.0 - 4.5 / 7.0));
        assert!(close(totals.saved_share().unwrap(), 4.125 / (8.25 + 4.5 / 7.0)));
        assert_eq!((totals.unpriced, totals.uncertain_saved_per_hour), (1, 0.0));
        assert_eq!(Totals::default().saved_share(), None);
    }
}
