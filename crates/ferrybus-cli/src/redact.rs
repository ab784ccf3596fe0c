//! Passwords never reach the output: every URL the tool prints, and every error message, goes
//! through [`text`] (or [`url`]), which replaces the password of each `scheme://user:password@`
//! authority and each `password=` parameter with `***`.

/// What a password is replaced with.
const MASK: &str = "***";

/// `url` with its password (and any `password=` query parameter) replaced by `***`.
///
/// ```ignore
/// assert_eq!(url("amqp://guest:guest@localhost:5672/%2f"), "amqp://guest:***@localhost:5672/%2f");
/// ```
pub(crate) fn url(url: &str) -> String {
    text(url)
}

/// `text` with the password of every URL in it replaced by `***`.
pub(crate) fn text(text: &str) -> String {
    let masked = mask_authorities(text);
    mask_parameters(&masked)
}

/// Characters that end a URL's authority inside free text.
fn ends_authority(c: char) -> bool {
    matches!(
        c,
        '/' | '?' | '#' | '"' | '\'' | '`' | '<' | '>' | ')' | ']' | ',' | ';'
    ) || c.is_whitespace()
}

fn mask_authorities(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let start = at + 3;
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        let end = after.find(ends_authority).unwrap_or(after.len());
        let authority = &after[..end];
        match authority.rfind('@') {
            Some(userinfo_end) => {
                let userinfo = &authority[..userinfo_end];
                match userinfo.find(':') {
                    Some(colon) => {
                        out.push_str(&userinfo[..=colon]);
                        out.push_str(MASK);
                    }
                    None => out.push_str(userinfo),
                }
                out.push_str(&authority[userinfo_end..]);
            }
            None => out.push_str(authority),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn mask_parameters(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let lower = rest.to_ascii_lowercase();
        let Some(at) = lower.find("password=") else {
            break;
        };
        let start = at + "password=".len();
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        let end = after
            .find(|c: char| c == '&' || c == '#' || ends_authority(c))
            .unwrap_or(after.len());
        if end > 0 {
            out.push_str(MASK);
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_passwords_in_urls() {
        assert_eq!(
            url("amqp://guest:guest@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert_eq!(
            url("postgres://app:p%40ss:w0rd@db/app?sslmode=require"),
            "postgres://app:***@db/app?sslmode=require"
        );
        assert_eq!(
            url("postgres://postgres@127.0.0.1:5432/test"),
            "postgres://postgres@127.0.0.1:5432/test"
        );
        assert_eq!(url("amqp://localhost"), "amqp://localhost");
        assert_eq!(
            url("postgres://db/app?user=a&password=s3cret&sslmode=disable"),
            "postgres://db/app?user=a&password=***&sslmode=disable"
        );
    }

    #[test]
    fn masks_every_url_in_text() {
        assert_eq!(
            text("cannot connect to \"amqp://a:b@h/v\" nor postgres://c:d@e:1/f: refused"),
            "cannot connect to \"amqp://a:***@h/v\" nor postgres://c:***@e:1/f: refused"
        );
        assert_eq!(text("no url here: a:b@c"), "no url here: a:b@c");
        assert_eq!(text("Password=hunter2 user=x"), "Password=*** user=x");
    }
}
