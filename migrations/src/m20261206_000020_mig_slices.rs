//! MIG slices as units of sale. A MIG instance the agent reports becomes a row of `gpus` of its
//! own (`parent_id` = the physical GPU, `mig_profile` such as `1g.10gb`, `model` the unit's
//! name: `H100-80GB MIG 1g.10gb`), so offers, prices, booking and holds treat a slice as a GPU.
//! `for_sale` says which rows are sold: a physical GPU's own row when it is sold whole, its
//! slices' rows when its provider sells it as MIG instances.
//!
//! Each unit covers slots `[slot_from, slot_to)` of its physical GPU: a whole GPU all eight,
//! a slice the one slot of its place in the layout. A hold copies its unit's physical GPU and
//! slots, and the no-overlap rule becomes "no two active holds on one physical GPU with
//! overlapping slots and times": a whole-GPU hold can never meet a slice hold on the same GPU
//! (nor two holds meet one slice), and the database enforces it as before (a PostgreSQL
//! exclusion constraint, SQLite triggers).

use sea_orm_migration::{prelude::*, schema::*, sea_orm::DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let gpu_columns: [ColumnDef; 5] = [
            big_integer_null(Gpus::ParentId),
            string_len_null(Gpus::MigProfile, 32),
            integer(Gpus::SlotFrom).default(0).to_owned(),
            integer(Gpus::SlotTo).default(8).to_owned(),
            boolean(Gpus::ForSale).default(true).to_owned(),
        ];
        for column in gpu_columns {
            manager.alter_table(Table::alter().table(Gpus::Table).add_column(column).to_owned()).await?;
        }
        manager
            .create_index(Index::create().name("idx_gpus_parent").table(Gpus::Table).col(Gpus::ParentId).to_owned())
            .await?;
        let hold_columns: [ColumnDef; 3] = [
            big_integer(RentalGpus::PhysicalGpuId).default(0).to_owned(),
            integer(RentalGpus::SlotFrom).default(0).to_owned(),
            integer(RentalGpus::SlotTo).default(8).to_owned(),
        ];
        for column in hold_columns {
            manager.alter_table(Table::alter().table(RentalGpus::Table).add_column(column).to_owned()).await?;
        }
        let db = manager.get_connection();
        // Every hold so far is of a whole GPU.
        db.execute_unprepared("UPDATE rental_gpus SET physical_gpu_id = gpu_id").await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_rental_gpus_physical_active")
                    .table(RentalGpus::Table)
                    .col(RentalGpus::PhysicalGpuId)
                    .col(RentalGpus::Active)
                    .to_owned(),
            )
            .await?;
        match manager.get_database_backend() {
            DbBackend::Postgres => {
                db.execute_unprepared("ALTER TABLE rental_gpus DROP CONSTRAINT rental_gpus_no_overlap").await?;
                db.execute_unprepared(
                    "ALTER TABLE rental_gpus ADD CONSTRAINT rental_gpus_no_overlap EXCLUDE USING gist \
                     (int8range(physical_gpu_id, physical_gpu_id, '[]') WITH &&, int4range(slot_from, slot_to) WITH &&, \
                     tstzrange(starts_at, ends_at) WITH &&) WHERE (active)",
                )
                .await?;
                db.execute_unprepared(
                    "ALTER TABLE rental_gpus ADD CONSTRAINT rental_gpus_slots CHECK (slot_from >= 0 AND slot_from < slot_to AND slot_to <= 8)",
                )
                .await?;
            }
            _ => {
                for event in ["INSERT", "UPDATE"] {
                    let lower = event.to_lowercase();
                    db.execute_unprepared(&format!("DROP TRIGGER IF EXISTS rental_gpus_no_overlap_{lower}")).await?;
                    db.execute_unprepared(&format!(
                        "CREATE TRIGGER rental_gpus_slots_no_overlap_{lower} BEFORE {event} ON rental_gpus \
                         WHEN NEW.active BEGIN \
                           SELECT RAISE(ABORT, 'rental_gpus_slots') \
                             WHERE NOT (NEW.slot_from >= 0 AND NEW.slot_from < NEW.slot_to AND NEW.slot_to <= 8); \
                           SELECT RAISE(ABORT, 'rental_gpus_no_overlap') WHERE EXISTS ( \
                             SELECT 1 FROM rental_gpus o WHERE o.physical_gpu_id = NEW.physical_gpu_id AND o.active \
                             AND o.id IS NOT NEW.id AND o.slot_from < NEW.slot_to AND NEW.slot_from < o.slot_to \
                             AND o.starts_at < NEW.ends_at AND NEW.starts_at < o.ends_at); \
                         END"
                    ))
                    .await?;
                }
            }
        }
        manager
            .alter_table(
                Table::alter()
                    .table(OfferStock::Table)
                    .add_column(string_len_null(OfferStock::MigProfile, 32))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration("MIG slices cannot be unmigrated: holds on slices would lose their GPU".into()))
    }
}

#[derive(DeriveIden)]
enum Gpus {
    Table,
    ParentId,
    MigProfile,
    SlotFrom,
    SlotTo,
    ForSale,
}

#[derive(DeriveIden)]
enum RentalGpus {
    Table,
    Active,
    PhysicalGpuId,
    SlotFrom,
    SlotTo,
}

#[derive(DeriveIden)]
enum OfferStock {
    Table,
    MigProfile,
}
