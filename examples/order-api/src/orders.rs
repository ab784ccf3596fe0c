//! The HTTP routes: `POST /orders` and `GET /orders/{id}`.

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use example_contracts::OrderPlaced;
use ferrybus::sea_orm::entity::Retarget;
use ferrybus::sea_orm::BusOutbox;
use ferrybus::{Publish, PublishError, SendOptions};
use rust_decimal::Decimal;
use sea_orm::sea_query::{
    Alias, ColumnDef, Expr, IntoIden, OnConflict, PostgresQueryBuilder, QuotedBuilder, Table,
    TableRef,
};
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DbErr, EntityName, EntityTrait, Set, TransactionTrait,
    TryInsertResult,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

/// The `orders` table (schema `orders` by default, `ORDERS_SCHEMA`): each statement is pointed
/// at the configured schema with ferrybus's [`Retarget`].
pub mod order {
    use sea_orm::entity::prelude::*;

    /// One order.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(schema_name = "orders", table_name = "orders")]
    pub struct Model {
        /// The order id (the client's, or a new UUIDv7).
        #[sea_orm(primary_key, auto_increment = false)]
        pub id: Uuid,
        /// The total.
        #[sea_orm(column_type = "Decimal(None)")]
        pub total: Decimal,
        /// ISO 4217 currency.
        #[sea_orm(column_type = "Text")]
        pub currency: String,
        /// The id of its `OrderPlaced` message.
        pub message_id: Uuid,
        /// When it was placed.
        pub created_at: DateTimeUtc,
    }

    /// No relations.
    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

/// What the handlers share.
#[derive(Clone, Debug)]
pub struct AppState {
    /// The order API's pool.
    pub db: DatabaseConnection,
    /// Publishes into the outbox tables, in the handler's transaction.
    pub outbox: BusOutbox,
    /// The schema of the `orders` table.
    pub schema: String,
}

/// The body of `POST /orders`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewOrder {
    /// The total, a decimal as a string (`"12.00"`) or a number.
    #[serde(with = "ferrybus::dotnet::decimal")]
    pub total: Decimal,
    /// ISO 4217 currency code.
    pub currency: String,
    /// The client's order id, to make retries of the same request idempotent (optional).
    #[serde(default)]
    pub order_id: Option<Uuid>,
}

/// The answer of `POST /orders`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Placed {
    /// The order.
    pub order_id: Uuid,
    /// The id of its `OrderPlaced` message (fixed once, kept on retries).
    pub message_id: Uuid,
}

/// The answer of `GET /orders/{id}`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Order {
    /// The order.
    pub order_id: Uuid,
    /// The total.
    #[serde(with = "ferrybus::dotnet::decimal")]
    pub total: Decimal,
    /// The currency.
    pub currency: String,
    /// The id of its `OrderPlaced` message.
    pub message_id: Uuid,
    /// When it was placed.
    pub created_at: DateTime<Utc>,
}

/// The routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/orders", post(place_order))
        .route("/orders/{id}", get(get_order))
        .with_state(state)
}

/// Creates `schema.orders` if it is missing.
pub async fn create_schema(db: &DatabaseConnection, schema: &str) -> Result<(), DbErr> {
    let txn = db.begin().await?;
    txn.execute_unprepared("SELECT pg_advisory_xact_lock(7242424243)")
        .await?;
    // sea-query has no CREATE SCHEMA statement: fixed text, the name quoted by sea-query.
    let mut create = String::from("CREATE SCHEMA IF NOT EXISTS ");
    PostgresQueryBuilder.prepare_iden(&Alias::new(schema).into_iden(), &mut create);
    txn.execute_unprepared(&create).await?;
    let table = Table::create()
        .table(TableRef::from((
            Alias::new(schema),
            Alias::new(order::Entity.table_name()),
        )))
        .if_not_exists()
        .col(ColumnDef::new(order::Column::Id).uuid().primary_key())
        .col(ColumnDef::new(order::Column::Total).decimal().not_null())
        .col(ColumnDef::new(order::Column::Currency).text().not_null())
        .col(ColumnDef::new(order::Column::MessageId).uuid().not_null())
        .col(
            ColumnDef::new(order::Column::CreatedAt)
                .timestamp_with_time_zone()
                .not_null()
                .default(Expr::current_timestamp()),
        )
        .to_owned();
    txn.execute(&table).await?;
    txn.commit().await
}

/// An error answer: `{"error": "..."}`.
#[derive(Debug)]
pub struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

impl From<DbErr> for ApiError {
    fn from(error: DbErr) -> Self {
        tracing::error!(%error, "database error");
        Self(StatusCode::INTERNAL_SERVER_ERROR, "database error".into())
    }
}

impl From<PublishError> for ApiError {
    fn from(error: PublishError) -> Self {
        tracing::error!(%error, "outbox error");
        Self(StatusCode::INTERNAL_SERVER_ERROR, "outbox error".into())
    }
}

fn validate(order: &NewOrder) -> Result<(), ApiError> {
    if order.total <= Decimal::ZERO {
        return Err(ApiError(
            StatusCode::UNPROCESSABLE_ENTITY,
            "total must be positive".into(),
        ));
    }
    let c = order.currency.as_bytes();
    if c.len() != 3 || !c.iter().all(u8::is_ascii_uppercase) {
        return Err(ApiError(
            StatusCode::UNPROCESSABLE_ENTITY,
            "currency must be three capital letters (ISO 4217)".into(),
        ));
    }
    Ok(())
}

/// `POST /orders`: stores the order and writes `OrderPlaced` into the outbox, in one
/// transaction; `201 {"orderId", "messageId"}`. The broker is not involved: the outbox delivery
/// service sends the message after the commit, whenever RabbitMQ is reachable. Posting an
/// `orderId` that exists answers `200` with the original ids and publishes nothing.
async fn place_order(
    State(state): State<AppState>,
    body: Result<Json<NewOrder>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(order) = body.map_err(|r| ApiError(r.status(), r.body_text()))?;
    validate(&order)?;
    let order_id = order.order_id.unwrap_or_else(Uuid::now_v7);
    // The MessageId is made once, here, and stored with the order.
    let message_id = Uuid::now_v7();
    let txn = state.db.begin().await?;
    let inserted = order::Entity::insert(order::ActiveModel {
        id: Set(order_id),
        total: Set(order.total),
        currency: Set(order.currency.clone()),
        message_id: Set(message_id),
        ..Default::default()
    })
    .on_conflict(
        OnConflict::column(order::Column::Id)
            .do_nothing()
            .to_owned(),
    )
    .retarget(&state.schema, order::Entity.table_name())
    .try_insert()
    .exec(&txn)
    .await?;
    if !matches!(inserted, TryInsertResult::Inserted(_)) {
        txn.rollback().await?;
        let existing = load(&state, order_id)
            .await?
            .ok_or_else(|| ApiError(StatusCode::CONFLICT, "order is being created".into()))?;
        let placed = Placed {
            order_id,
            message_id: existing.message_id,
        };
        return Ok((StatusCode::OK, Json(placed)).into_response());
    }
    let event = OrderPlaced {
        order_id,
        total: order.total,
        currency: order.currency.clone(),
    };
    state
        .outbox
        .on(&txn)
        .publish_with(&event, SendOptions::new().message_id(message_id))
        .await?;
    txn.commit().await?;
    tracing::info!(%order_id, %message_id, total = %order.total, currency = %order.currency, "order placed; OrderPlaced is in the outbox");
    let mut headers = HeaderMap::new();
    if let Ok(location) = HeaderValue::from_str(&format!("/orders/{order_id}")) {
        headers.insert(header::LOCATION, location);
    }
    Ok((
        StatusCode::CREATED,
        headers,
        Json(Placed {
            order_id,
            message_id,
        }),
    )
        .into_response())
}

/// `GET /orders/{id}`: the order, or 404.
async fn get_order(
    State(state): State<AppState>,
    id: Result<Path<Uuid>, PathRejection>,
) -> Result<Json<Order>, ApiError> {
    let Path(id) = id.map_err(|r| ApiError(StatusCode::BAD_REQUEST, r.body_text()))?;
    load(&state, id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError(StatusCode::NOT_FOUND, format!("order {id} not found")))
}

async fn load(state: &AppState, id: Uuid) -> Result<Option<Order>, DbErr> {
    let order = order::Entity::find_by_id(id)
        .retarget(&state.schema, order::Entity.table_name())
        .one(&state.db)
        .await?;
    Ok(order.map(|order| Order {
        order_id: order.id,
        total: order.total,
        currency: order.currency,
        message_id: order.message_id,
        created_at: order.created_at,
    }))
}
