//! [`Template`]: a statement's text as sea-query rendered it on first use, bound to new values
//! afterwards.
//!
//! Rendering (quoting every identifier, walking the expression tree) cost more client time per
//! delivery than executing the statement. The statements that run for every delivery (see
//! `Sql`'s templated methods) therefore keep their first rendering and then only build their
//! values, listed in the order sea-query binds them: a unit test in `sql` compares every
//! templated statement with a fresh build, text and values.

use std::sync::OnceLock;

use sea_orm::{DbBackend, Statement, Value};

/// The text of one statement shape (see the [module docs](self)).
#[derive(Debug, Default)]
pub(crate) struct Template(OnceLock<String>);

impl Template {
    /// The kept text; `None` before the first use.
    pub(crate) fn text(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }

    /// Keeps the text of `rendered` (a first build with sea-query) and returns it.
    pub(crate) fn keep(&self, rendered: Statement) -> Statement {
        let _ = self.0.set(rendered.sql.clone());
        rendered
    }
}

/// `text` (a [`Template`]'s) with `values`, listed in the order sea-query binds them.
pub(crate) fn bind(text: &str, values: Vec<Value>) -> Statement {
    Statement::from_sql_and_values(DbBackend::Postgres, text, values)
}
