//! What rentals cost: per-second cost of GPU-hours in exact micro-dollars, and the spot
//! market's one clearing price. Pure functions, so the rules are tested on their own.

/// Cost of `seconds` of `gpus` GPUs at `price` per GPU-hour, micro-dollars, rounded down.
/// Billing charges `cost(total) - cost(already billed)`, so splitting a rental into any number
/// of settlements charges exactly `cost(total)`.
pub fn cost(price: i64, gpus: i64, seconds: i64) -> i64 {
    let micros = i128::from(price) * i128::from(gpus) * i128::from(seconds) / 3600;
    i64::try_from(micros).unwrap_or(i64::MAX)
}

/// The spot clearing price of one host's GPUs of one model: the provider's minimum while any
/// GPU is free, otherwise the lowest bid still holding GPUs (every spot rental pays the same
/// price, never more than its bid).
pub fn clearing_price(min_bid: i64, free_gpus: usize, live_bids: &[i64]) -> i64 {
    if free_gpus > 0 {
        return min_bid;
    }
    live_bids.iter().copied().min().map_or(min_bid, |lowest| lowest.max(min_bid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The clearing rule: the minimum while any GPU is free; else the lowest live bid, never
        /// below the minimum and never above any live bid that is itself at least the minimum.
        /// More demand never lowers it.
        #[test]
        fn spot_clears_at_one_fair_price(
            min in 1i64..5_000_000,
            free in 0usize..3,
            bids in proptest::collection::vec(1i64..10_000_000, 0..8),
            extra in 1i64..10_000_000,
        ) {
            let price = clearing_price(min, free, &bids);
            prop_assert!(price >= min);
            if free > 0 || bids.is_empty() {
                prop_assert_eq!(price, min);
            } else {
                prop_assert!(bids.iter().filter(|b| **b >= min).all(|b| price <= *b));
                prop_assert!(bids.contains(&price) || price == min);
            }
            let mut more = bids.clone();
            more.push(extra);
            if free == 0 && !bids.is_empty() && extra >= price {
                prop_assert_eq!(clearing_price(min, free, &more), price);
            }
        }

        /// Billing in any number of settlements charges exactly the cost of the whole.
        #[test]
        fn split_settlements_add_up_exactly(
            price in 1i64..100_000_000,
            gpus in 1i64..65,
            cuts in proptest::collection::vec(0i64..100_000, 0..12),
        ) {
            let mut cuts = cuts;
            cuts.sort_unstable();
            let mut billed = 0;
            let mut charged = 0;
            for seconds in cuts.iter().copied().chain(std::iter::once(100_000)) {
                charged += cost(price, gpus, seconds) - cost(price, gpus, billed);
                billed = seconds;
            }
            prop_assert_eq!(charged, cost(price, gpus, 100_000));
        }
    }
}
