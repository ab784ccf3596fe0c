//! The catalog queries of the schema check and the migrator: the columns of some tables, the
//! unique indexes of a table, the foreign keys of a table. Built with sea-query (every name a
//! bound value or a quoted identifier); read-only.

use std::collections::{BTreeMap, BTreeSet};

use sea_orm::sea_query::ExprTrait;
use sea_orm::sea_query::{
    extension::postgres::PgFunc, Alias, DynIden, Expr, IntoIden, Order, Query, SimpleExpr, TableRef,
};
use sea_orm::{ConnectionTrait, DbErr, FromQueryResult};

use crate::config::Tables;
use crate::entity::OutboxTable;
use crate::sql::build;

fn a(name: &'static str) -> DynIden {
    Alias::new(name).into_iden()
}

/// `alias.column::text`: the catalogs' `name`, `sql_identifier` and `character_data` columns
/// compared with and decoded as text.
fn text(table: &DynIden, column: &'static str) -> SimpleExpr {
    Expr::col((table.clone(), a(column))).cast_as(Alias::new("text"))
}

/// `schema.name AS alias` of a catalog table.
fn catalog(schema: &'static str, name: &'static str, alias: &DynIden) -> TableRef {
    crate::entity::schema_table(a(schema), a(name), Some(alias.clone()))
}

/// A column as `information_schema.columns` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Column {
    /// `data_type`: `uuid`, `timestamp with time zone`, `character varying`, …
    pub(crate) data_type: String,
    /// Whether it takes NULL.
    pub(crate) nullable: bool,
    /// Whether the database fills it when an insert leaves it out: a default, an identity or a
    /// generated column.
    pub(crate) has_default: bool,
}

#[derive(FromQueryResult)]
struct ColumnRow {
    table_name: String,
    column_name: String,
    data_type: String,
    nullable: bool,
    has_default: bool,
}

/// The columns of the tables `names` of `schema` that exist, by table and column name (a table
/// that does not exist has no entry).
pub(crate) async fn columns(
    db: &impl ConnectionTrait,
    schema: &str,
    names: &[&str],
) -> Result<BTreeMap<String, BTreeMap<String, Column>>, DbErr> {
    let c = a("c");
    let yes = |column| Expr::expr(text(&c, column)).eq("YES");
    let query = Query::select()
        .expr_as(text(&c, "table_name"), a("table_name"))
        .expr_as(text(&c, "column_name"), a("column_name"))
        .expr_as(text(&c, "data_type"), a("data_type"))
        .expr_as(yes("is_nullable"), a("nullable"))
        .expr_as(
            Expr::col((c.clone(), a("column_default")))
                .is_not_null()
                .or(yes("is_identity"))
                .or(Expr::expr(text(&c, "is_generated")).eq("ALWAYS")),
            a("has_default"),
        )
        .from(catalog("information_schema", "columns", &c))
        .and_where(Expr::expr(text(&c, "table_schema")).eq(schema))
        .and_where(Expr::expr(text(&c, "table_name")).is_in(names.iter().copied()))
        .to_owned();
    let mut tables: BTreeMap<String, BTreeMap<String, Column>> = BTreeMap::new();
    for row in db.query_all_raw(build(&query)).await? {
        let row = ColumnRow::from_query_result(&row, "")?;
        tables.entry(row.table_name).or_default().insert(
            row.column_name,
            Column {
                data_type: row.data_type,
                nullable: row.nullable,
                has_default: row.has_default,
            },
        );
    }
    Ok(tables)
}

#[derive(FromQueryResult)]
struct IndexColumnRow {
    index: i64,
    column_name: String,
}

/// The column sets of the unique indexes of `schema.table` that `INSERT … ON CONFLICT
/// (columns)` can infer: unique, not partial (a primary key or unique constraint has one).
pub(crate) async fn unique_keys(
    db: &impl ConnectionTrait,
    schema: &str,
    table: &str,
) -> Result<Vec<BTreeSet<String>>, DbErr> {
    let (i, c, n, att) = (a("i"), a("c"), a("n"), a("att"));
    let query = Query::select()
        .expr_as(
            Expr::col((i.clone(), a("indexrelid"))).cast_as(Alias::new("bigint")),
            a("index"),
        )
        .expr_as(text(&att, "attname"), a("column_name"))
        .from(catalog("pg_catalog", "pg_index", &i))
        .inner_join(
            catalog("pg_catalog", "pg_class", &c),
            Expr::col((c.clone(), a("oid"))).equals((i.clone(), a("indrelid"))),
        )
        .inner_join(
            catalog("pg_catalog", "pg_namespace", &n),
            Expr::col((n.clone(), a("oid"))).equals((c.clone(), a("relnamespace"))),
        )
        .inner_join(
            catalog("pg_catalog", "pg_attribute", &att),
            Expr::col((att.clone(), a("attrelid")))
                .equals((c.clone(), a("oid")))
                .and(
                    Expr::col((att.clone(), a("attnum")))
                        .eq(PgFunc::any(Expr::col((i.clone(), a("indkey"))))),
                ),
        )
        .and_where(Expr::expr(text(&n, "nspname")).eq(schema))
        .and_where(Expr::expr(text(&c, "relname")).eq(table))
        .and_where(Expr::col((i.clone(), a("indisunique"))).eq(true))
        .and_where(Expr::col((i.clone(), a("indpred"))).is_null())
        .to_owned();
    let mut keys: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
    for row in db.query_all_raw(build(&query)).await? {
        let row = IndexColumnRow::from_query_result(&row, "")?;
        keys.entry(row.index).or_default().insert(row.column_name);
    }
    Ok(keys.into_values().collect())
}

/// A foreign key of a table.
#[derive(Clone, Debug, PartialEq, Eq, FromQueryResult)]
pub struct ForeignKey {
    /// The constraint's name (`FK_OutboxMessage_InboxState_InboxMessageId_InboxConsumerId`).
    pub name: String,
    /// The table it is declared on.
    pub table: String,
    /// The schema of the table it references.
    pub references_schema: String,
    /// The table it references.
    pub references: String,
}

impl ForeignKey {
    /// Whether it references `to` of `tables` (same schema).
    pub(crate) fn points_to(&self, tables: &Tables, to: OutboxTable) -> bool {
        self.references_schema == tables.schema_name() && self.references == to.name(tables)
    }
}

/// The foreign keys declared on `schema.table`, ordered by referenced table and name.
pub(crate) async fn foreign_keys(
    db: &impl ConnectionTrait,
    schema: &str,
    table: &str,
) -> Result<Vec<ForeignKey>, DbErr> {
    let (k, c, n, f, fns) = (a("k"), a("c"), a("n"), a("f"), a("fns"));
    let query = Query::select()
        .expr_as(text(&k, "conname"), a("name"))
        .expr_as(text(&c, "relname"), a("table"))
        .expr_as(text(&fns, "nspname"), a("references_schema"))
        .expr_as(text(&f, "relname"), a("references"))
        .from(catalog("pg_catalog", "pg_constraint", &k))
        .inner_join(
            catalog("pg_catalog", "pg_class", &c),
            Expr::col((c.clone(), a("oid"))).equals((k.clone(), a("conrelid"))),
        )
        .inner_join(
            catalog("pg_catalog", "pg_namespace", &n),
            Expr::col((n.clone(), a("oid"))).equals((c.clone(), a("relnamespace"))),
        )
        .inner_join(
            catalog("pg_catalog", "pg_class", &f),
            Expr::col((f.clone(), a("oid"))).equals((k.clone(), a("confrelid"))),
        )
        .inner_join(
            catalog("pg_catalog", "pg_namespace", &fns),
            Expr::col((fns.clone(), a("oid"))).equals((f.clone(), a("relnamespace"))),
        )
        .and_where(Expr::expr(text(&k, "contype")).eq("f"))
        .and_where(Expr::expr(text(&n, "nspname")).eq(schema))
        .and_where(Expr::expr(text(&c, "relname")).eq(table))
        .order_by_expr(text(&f, "relname"), Order::Asc)
        .order_by_expr(text(&k, "conname"), Order::Asc)
        .to_owned();
    let rows = db.query_all_raw(build(&query)).await?;
    rows.iter()
        .map(|row| ForeignKey::from_query_result(row, ""))
        .collect()
}
