//! The entities of MassTransit's tables with EF Core's default naming: tables `"InboxState"`,
//! `"OutboxState"`, `"OutboxMessage"` in schema `public`, PascalCase columns
//! ([`Tables::dotnet_default`](crate::Tables::dotnet_default)). Their Rust fields are those of
//! the snake_case entities; [`Retarget::on`](crate::entity::Retarget::on) moves them to other
//! schemas and table names.

pub mod inbox_state;
pub mod outbox_message;
pub mod outbox_state;
