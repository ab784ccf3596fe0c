//! TLS to both services, against a CA the test makes itself (rcgen), rustls only: billing on
//! `amqps://` to a RabbitMQ TLS listener and on PostgreSQL with `sslmode=verify-full`, plus the
//! refusals that prove the certificates are checked.
//!
//! Neither shared service is reconfigured: the test starts a RabbitMQ node with only a TLS
//! listener (`scripts/rabbitmq-cluster.sh start-tls`) and a throwaway PostgreSQL that accepts
//! only TLS (`scripts/postgres-tls.sh`), each in a directory of its own, and removes both. It
//! is skipped, saying so, when either script cannot run here.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use example_billing::{Billing, Config};
use example_contracts::OrderPlaced;
use ferrybus::rabbitmq::{ErrorKind, RabbitMqBus};
use ferrybus::Publish;
use ferrybus_e2e::{eventually, init_tracing, unique_suffix, WAIT};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement,
};
use uuid::Uuid;

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(name)
}

fn run(name: &str, args: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
    let output = Command::new("bash")
        .arg(script(name))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// A CA and a certificate it signed for `localhost` and `127.0.0.1`, as PEM files in `dir`.
struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    /// Another CA, which signed nothing here.
    stranger: PathBuf,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

fn pki(dir: &Path) -> Pki {
    std::fs::create_dir_all(dir).unwrap();
    let authority = ca("ferrybus test CA");
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let cert = params.signed_by(&key, &authority).unwrap();
    let write = |name: &str, pem: String| {
        let path = dir.join(name);
        std::fs::write(&path, pem).unwrap();
        path
    };
    Pki {
        ca: write("ca.pem", authority.pem()),
        cert: write("server.pem", cert.pem()),
        key: write("server.key", key.serialize_pem()),
        stranger: write("stranger.pem", ca("someone else").pem()),
    }
}

/// A free port `p` with `20000 + p` free too (RabbitMQ's distribution port).
fn rabbit_port() -> u16 {
    (5712..5790)
        .find(|p| {
            std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok()
                && std::net::TcpListener::bind(("127.0.0.1", 20000 + *p)).is_ok()
        })
        .expect("a free port")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Stops both servers and removes the directory.
struct Servers {
    dir: PathBuf,
}

impl Drop for Servers {
    fn drop(&mut self) {
        let rabbit = self.dir.join("rabbitmq");
        let _ = run(
            "rabbitmq-cluster.sh",
            &["stop-tls"],
            &[("FERRYBUS_CLUSTER_DIR", rabbit.to_str().unwrap())],
        );
        let _ = std::fs::remove_dir_all(&rabbit);
        let pg = self.dir.join("postgres");
        let _ = run("postgres-tls.sh", &["stop", pg.to_str().unwrap()], &[]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn connect(url: &str) -> Result<DatabaseConnection, sea_orm::DbErr> {
    let mut options = ConnectOptions::new(url);
    options
        .max_connections(2)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(5))
        .sqlx_logging(false);
    Database::connect(options).await
}

async fn over_tls(db: &DatabaseConnection) -> bool {
    let row = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get("", "ssl").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn billing_runs_over_tls_to_both_services_and_checks_their_certificates() {
    init_tracing();
    for name in ["rabbitmq-cluster.sh", "postgres-tls.sh"] {
        if let Err(why) = run(name, &["check"], &[]) {
            eprintln!("SKIPPED: scripts/{name} cannot run here: {why}");
            return;
        }
    }
    let dir = std::env::temp_dir().join(format!("ferrybus-tls-{}", unique_suffix()));
    let servers = Servers { dir: dir.clone() };
    let pki = pki(&dir.join("pki"));
    let path = |p: &PathBuf| p.to_str().unwrap().to_owned();

    // PostgreSQL, TLS only.
    let pg_port = free_port();
    run(
        "postgres-tls.sh",
        &[
            "start",
            &path(&dir.join("postgres")),
            &pg_port.to_string(),
            &path(&pki.cert),
            &path(&pki.key),
        ],
        &[],
    )
    .expect("PostgreSQL starts");
    let pg = |mode: &str, ca: &PathBuf| {
        format!(
            "postgres://postgres@localhost:{pg_port}/postgres?sslmode={mode}&sslrootcert={}",
            path(ca)
        )
    };
    let verified = pg("verify-full", &pki.ca);
    let db = connect(&verified).await.expect("verify-full with our CA");
    assert!(over_tls(&db).await, "the session is encrypted");
    let required = connect(&pg("require", &pki.ca)).await.expect("require");
    assert!(over_tls(&required).await);
    assert!(
        connect(&pg("verify-full", &pki.stranger)).await.is_err(),
        "a certificate from another CA is refused"
    );
    assert!(
        connect(&format!(
            "postgres://postgres@localhost:{pg_port}/postgres?sslmode=disable"
        ))
        .await
        .is_err(),
        "the server takes TLS only"
    );

    // RabbitMQ, TLS only.
    let mq_port = rabbit_port();
    let rabbit_env = [
        ("FERRYBUS_CLUSTER_DIR", path(&dir.join("rabbitmq"))),
        ("FERRYBUS_TLS_PORT", mq_port.to_string()),
    ];
    let rabbit_env: Vec<(&str, &str)> = rabbit_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    run(
        "rabbitmq-cluster.sh",
        &[
            "start-tls",
            &path(&pki.cert),
            &path(&pki.key),
            &path(&pki.ca),
        ],
        &rabbit_env,
    )
    .expect("the TLS node starts");
    let amqps = format!("amqps://guest:guest@127.0.0.1:{mq_port}/%2f");
    let ca_pem = std::fs::read_to_string(&pki.ca).unwrap();
    let refused = RabbitMqBus::builder(&amqps)
        .connect_timeout(Duration::from_secs(3))
        .tls_root_certificates(std::fs::read_to_string(&pki.stranger).unwrap())
        .start()
        .await
        .expect_err("a certificate from another CA is refused");
    assert_eq!(refused.kind(), ErrorKind::NotConnected, "{refused}");

    // Billing on both.
    let id = unique_suffix();
    let config = Config {
        database_url: verified.clone(),
        amqp_url: amqps.clone(),
        amqp_tls_ca_file: Some(pki.ca.clone()),
        billing_schema: format!("tls_billing_{id}"),
        tables: ferrybus::sea_orm::Tables::new().schema(format!("tls_messaging_{id}")),
        invoice_queue: format!("tls-invoice-{id}"),
        payments_queue: format!("tls-payments-{id}"),
        bind_message_types: false,
        payment_delay: Duration::from_millis(1),
        connection_name: "e2e-billing-tls".into(),
        ..Config::default()
    };
    let billing = Billing::start(&config)
        .await
        .expect("billing starts over TLS");
    assert_eq!(
        billing.bus().host().to_string(),
        "rabbitmqs://127.0.0.1:".to_owned() + &mq_port.to_string() + "/"
    );
    let sender = RabbitMqBus::builder(&amqps)
        .tls_root_certificates(ca_pem)
        .start()
        .await
        .expect("the sender connects over TLS");
    let order = OrderPlaced {
        order_id: Uuid::now_v7(),
        total: "12.00".parse().unwrap(),
        currency: "TRY".into(),
    };
    sender
        .send(&format!("queue:{}", config.invoice_queue), &order)
        .await
        .expect("sent");
    let sql = format!(
        "SELECT count(*) AS n FROM \"{}\".invoices WHERE order_id = '{}'",
        config.billing_schema, order.order_id
    );
    eventually("the invoice, over TLS both ways", WAIT, || async {
        let row = db
            .query_one_raw(Statement::from_string(DbBackend::Postgres, sql.clone()))
            .await
            .ok()??;
        (row.try_get::<i64>("", "n").ok()? == 1).then_some(())
    })
    .await;
    sender.stop().await;
    billing.stop().await;
    drop(servers);
}
