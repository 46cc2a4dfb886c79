//! The last line of defence against a page showing a secret: every response body goes
//! through [`Scrubber::scrub`] before it leaves. Transcripts hold what agents read and
//! ran (an `env` dump, a config file), so keys can be in them; the pages escape and
//! render them, and this takes out what looks like a credential: API keys by their
//! known shapes, `NAME=value` where the name says key/token/secret/password, a URL's
//! password, a bearer header, and the server's own token.

use regex::Regex;

/// What a hidden value is replaced with.
pub const HIDDEN: &str = "[已隐去]";

pub struct Scrubber {
    shapes: Regex,
    assignments: Regex,
    url_passwords: Regex,
    token: Option<String>,
}

impl Scrubber {
    pub fn new(token: Option<String>) -> Result<Scrubber, regex::Error> {
        Ok(Scrubber {
            // Anthropic, OpenAI-style, GitHub, Slack, AWS access key ids, bearer values.
            shapes: Regex::new(
                r"sk-ant-[A-Za-z0-9_\-]{6,}|\bsk-[A-Za-z0-9_\-]{20,}|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}|\bxox[abposr]-[A-Za-z0-9\-]{10,}|\bAKIA[0-9A-Z]{16}\b|(?i:bearer)\s+[A-Za-z0-9._~+/\-]{12,}=*",
            )?,
            // NAME=value, NAME: value, "NAME":"value" (also HTML-escaped quotes).
            assignments: Regex::new(
                r#"(?i)\b([A-Z0-9_]*(?:API_?KEY|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIALS?|PRIVATE_KEY|AUTH)[A-Z0-9_]*)((?:&quot;|"|')?\s*[=:]\s*(?:&quot;|"|')?)([^\s"'&<>,;]{4,})"#,
            )?,
            url_passwords: Regex::new(r"([a-z][a-z0-9+.\-]*://[^:/@\s]+):([^@\s/]+)@")?,
            token: token.filter(|t| !t.is_empty()),
        })
    }

    /// `text` with every credential-looking value replaced by [`HIDDEN`].
    pub fn scrub(&self, text: &str) -> String {
        let mut out = self.shapes.replace_all(text, HIDDEN).into_owned();
        out = self
            .assignments
            .replace_all(&out, |c: &regex::Captures| {
                // A count (`max_tokens: 8000`) is no secret.
                if c[3].chars().all(|ch| ch.is_ascii_digit() || ch == '.') {
                    c[0].to_string()
                } else {
                    format!("{}{}{HIDDEN}", &c[1], &c[2])
                }
            })
            .into_owned();
        out = self
            .url_passwords
            .replace_all(&out, format!("${{1}}:{HIDDEN}@").as_str())
            .into_owned();
        if let Some(token) = &self.token {
            out = out.replace(token.as_str(), HIDDEN);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_passwords_are_hidden_and_the_rest_is_kept() {
        let s = Scrubber::new(Some("the-serve-token-123".into())).unwrap();
        let text = "ANTHROPIC_API_KEY=sk-ant-api03-abcdefghijk echo hi\n\
                    {\"GITHUB_TOKEN\":\"ghp_abcdefghijklmnopqrstuvwxyz\"}\n\
                    postgres://me:hunter2@db/x\nAuthorization: Bearer abcdefghijklmnop\n\
                    the-serve-token-123 max_tokens: 8000 tokens=12";
        let out = s.scrub(text);
        for secret in [
            "sk-ant-api03",
            "ghp_abc",
            "hunter2",
            "abcdefghijklmnop",
            "the-serve-token",
        ] {
            assert!(!out.contains(secret), "{secret} in {out}");
        }
        assert!(
            out.contains("echo hi") && out.contains("postgres://me:"),
            "{out}"
        );
        assert!(out.contains("max_tokens: 8000"), "{out}");
    }
}
