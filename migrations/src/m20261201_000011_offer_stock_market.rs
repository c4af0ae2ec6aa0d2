//! The market's facts of each offer join its stock row, so a search is one indexed read.
//!
//! With 10,000 hosts, joining `hosts` and `host_prices` into every search to filter, sort and
//! count made each request cost tens of milliseconds. `offer_stock` now also carries whether
//! the offer is on the market (host listed, online, not revoked, priced), its prices and its
//! location; the service refreshes a host's rows in the same transaction as every change to
//! those facts, and the indexes below give the default sorts their order, so the first page
//! reads its 20 rows in index order and the count scans one narrow index.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

const SORT_INDEXES: [(&str, OfferStock); 4] = [
    ("idx_offer_stock_on_demand", OfferStock::OnDemandMicros),
    ("idx_offer_stock_reserved", OfferStock::ReservedMicros),
    ("idx_offer_stock_spot", OfferStock::SpotMinBidMicros),
    ("idx_offer_stock_free", OfferStock::GpusFree),
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite's ALTER TABLE adds one at a time.
        let columns = [
            boolean(OfferStock::OnMarket).default(false).to_owned(),
            string_null(OfferStock::LocationKey),
            big_integer(OfferStock::OnDemandMicros).default(0).to_owned(),
            big_integer(OfferStock::ReservedMicros).default(0).to_owned(),
            big_integer(OfferStock::SpotMinBidMicros).default(0).to_owned(),
        ];
        for mut column in columns {
            manager.alter_table(Table::alter().table(OfferStock::Table).add_column(&mut column).to_owned()).await?;
        }
        // Each sort's order, with `gpus_free` last so the count is read from the index alone.
        // The new columns are filled by the stock rebuild every start-up runs.
        for (name, sort) in SORT_INDEXES {
            let mut index = Index::create();
            index.name(name).table(OfferStock::Table).col(OfferStock::OnMarket).col(sort);
            index.col(OfferStock::HostId).col(OfferStock::GpuModel);
            if !matches!(sort, OfferStock::GpusFree) {
                index.col(OfferStock::GpusFree);
            }
            manager.create_index(index.to_owned()).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for (name, _) in SORT_INDEXES {
            manager.drop_index(Index::drop().name(name).table(OfferStock::Table).to_owned()).await?;
        }
        for column in [
            OfferStock::OnMarket,
            OfferStock::LocationKey,
            OfferStock::OnDemandMicros,
            OfferStock::ReservedMicros,
            OfferStock::SpotMinBidMicros,
        ] {
            manager.alter_table(Table::alter().table(OfferStock::Table).drop_column(column).to_owned()).await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden, Clone, Copy)]
enum OfferStock {
    Table,
    HostId,
    GpuModel,
    GpusFree,
    OnMarket,
    LocationKey,
    OnDemandMicros,
    ReservedMicros,
    SpotMinBidMicros,
}
