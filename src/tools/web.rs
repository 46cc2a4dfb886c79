//! WebSearch and WebFetch as client tools (Claude Code's names and input shapes). The
//! model calls them like any tool, so the permission layer can refuse a call (the
//! judge's boundary); a call that is let through runs as a side request to the Messages
//! API with the server tool (`web_search_20250305`, `web_fetch_20250910`), as Claude
//! Code's WebSearch does, and its answer becomes the tool result, sources kept.
//!
//! Why client tools: offered as server tools they could only be given to the agents
//! allowed them, so those agents' tool list differed from the others' and the prompt
//! cache's prefix (tools, then the memory) was written twice per run. This file builds
//! the side request and reads its reply; the engine sends it (`engine/web.rs`).

use crate::content::{Block, Raw, ToolInput};
use crate::model::{ServerTool, ServerToolKind, ToolDef};
use crate::transcript::tools::{WEB_FETCH, WEB_SEARCH};
use serde::Deserialize;
use serde_json::json;

/// The side request's system prompt for a search (Claude Code's).
pub const SEARCH_SYSTEM: &str = "You run a web search for another Claude model, which is waiting on the result and can search again. Search once, then reply with a brief summary of the results.";
/// The side request's system prompt for a fetch.
pub const FETCH_SYSTEM: &str = "You fetch one web page or PDF for another Claude model, which is waiting on the result. Fetch the URL you are given once, then answer the request about its content, briefly and from the page alone; quote exactly where wording matters.";
/// Searches one side request may make (Claude Code's `max_uses`).
pub const SEARCH_MAX_USES: u32 = 8;
/// Fetches one side request may make: the one URL.
pub const FETCH_MAX_USES: u32 = 1;

/// `WebSearch`'s definition, offered to every agent of the pipeline alike.
pub fn search_definition() -> ToolDef {
    ToolDef {
        name: WEB_SEARCH.into(),
        description: "Search the web and use the results to inform responses. Returns \
                      result titles and URLs with a short summary. Use it for current \
                      information or anything past your knowledge cutoff. Cite the \
                      sources you use as markdown links."
            .into(),
        input_schema: Raw::of_tree(&json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 2, "description": "The search query to use"},
                "allowed_domains": {"type": "array", "items": {"type": "string"}, "description": "Only include search results from these domains"},
                "blocked_domains": {"type": "array", "items": {"type": "string"}, "description": "Never include search results from these domains"}
            },
            "required": ["query"],
            "additionalProperties": false
        })),
    }
}

/// `WebFetch`'s definition, offered to every agent of the pipeline alike.
pub fn fetch_definition() -> ToolDef {
    ToolDef {
        name: WEB_FETCH.into(),
        description: "Fetch a URL (a web page or a PDF) and answer a prompt about its \
                      content. Returns the answer and the URL it came from. The URL \
                      must be fully formed (http or https)."
            .into(),
        input_schema: Raw::of_tree(&json!({
            "type": "object",
            "properties": {
                "url": {"type": "string", "format": "uri", "description": "The URL to fetch content from"},
                "prompt": {"type": "string", "description": "The prompt to run on the fetched content"}
            },
            "required": ["url", "prompt"],
            "additionalProperties": false
        })),
    }
}

/// The domains an agent's rules give a web tool (the permission layer's `WebAccess`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Domains {
    /// Only these; empty: any not blocked.
    pub allowed: Vec<String>,
    pub blocked: Vec<String>,
}

/// One web call as its side request: the system prompt, the one user message, the
/// server tool with its limits, and what the result is headed with.
#[derive(Debug, Clone, PartialEq)]
pub struct SideRequest {
    pub system: &'static str,
    pub prompt: String,
    pub tool: ServerTool,
    /// The query or the URL, as the call gave it.
    pub subject: String,
    pub kind: ServerToolKind,
}

#[derive(Deserialize)]
struct SearchInput {
    query: String,
    #[serde(default)]
    allowed_domains: Vec<String>,
    #[serde(default)]
    blocked_domains: Vec<String>,
}

#[derive(Deserialize)]
struct FetchInput {
    url: String,
    prompt: String,
}

impl SideRequest {
    /// The side request of a `WebSearch` or `WebFetch` call, within the domains the
    /// agent's rules give it; `Err` is the message of an error result.
    pub fn of(name: &str, input: &ToolInput, rules: &Domains) -> Result<SideRequest, String> {
        match name {
            WEB_SEARCH => Self::search(input, rules),
            WEB_FETCH => Self::fetch(input, rules),
            _ => Err(format!("No such tool available: {name}")),
        }
    }

    fn search(input: &ToolInput, rules: &Domains) -> Result<SideRequest, String> {
        let input: SearchInput = serde_json::from_str(input.text())
            .map_err(|e| format!("WebSearch: the input does not fit the schema ({e})"))?;
        if input.query.trim().chars().count() < 2 {
            return Err("WebSearch: the query must have at least 2 characters".into());
        }
        if !input.allowed_domains.is_empty() && !input.blocked_domains.is_empty() {
            return Err(
                "WebSearch: cannot specify both allowed_domains and blocked_domains in the same request"
                    .into(),
            );
        }
        // The rules' lists bound the call's: an allow list is narrowed, never widened.
        let allowed = if rules.allowed.is_empty() {
            input.allowed_domains
        } else if input.allowed_domains.is_empty() {
            rules.allowed.clone()
        } else {
            let both: Vec<String> = input
                .allowed_domains
                .into_iter()
                .filter(|d| rules.allowed.iter().any(|r| within(d, r)))
                .collect();
            if both.is_empty() {
                return Err(format!(
                    "WebSearch: none of allowed_domains is a domain this agent may search ({})",
                    rules.allowed.join(", ")
                ));
            }
            both
        };
        let mut blocked = rules.blocked.clone();
        blocked.extend(input.blocked_domains);
        // The API takes one list or the other.
        let blocked = if allowed.is_empty() {
            blocked
        } else {
            Vec::new()
        };
        Ok(SideRequest {
            system: SEARCH_SYSTEM,
            prompt: format!("Perform a web search for the query: {}", input.query),
            tool: ServerTool {
                kind: ServerToolKind::WebSearch,
                max_uses: Some(SEARCH_MAX_USES),
                allowed_domains: allowed,
                blocked_domains: blocked,
            },
            subject: input.query,
            kind: ServerToolKind::WebSearch,
        })
    }

    fn fetch(input: &ToolInput, rules: &Domains) -> Result<SideRequest, String> {
        let input: FetchInput = serde_json::from_str(input.text())
            .map_err(|e| format!("WebFetch: the input does not fit the schema ({e})"))?;
        let url = reqwest::Url::parse(input.url.trim())
            .map_err(|e| format!("WebFetch: {:?} is not a URL ({e})", input.url))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "WebFetch: only http and https URLs ({})",
                input.url
            ));
        }
        let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
        // A second line behind the permission layer's check and the API's own lists.
        if rules.blocked.iter().any(|d| within(&host, d))
            || (!rules.allowed.is_empty() && !rules.allowed.iter().any(|d| within(&host, d)))
        {
            return Err(format!(
                "WebFetch: this agent may not fetch from {host} (its rules' domains)"
            ));
        }
        Ok(SideRequest {
            system: FETCH_SYSTEM,
            prompt: format!(
                "Fetch {url} and answer this about its content:\n\n{}",
                input.prompt
            ),
            tool: ServerTool {
                kind: ServerToolKind::WebFetch,
                max_uses: Some(FETCH_MAX_USES),
                allowed_domains: rules.allowed.clone(),
                blocked_domains: if rules.allowed.is_empty() {
                    rules.blocked.clone()
                } else {
                    Vec::new()
                },
            },
            subject: url.to_string(),
            kind: ServerToolKind::WebFetch,
        })
    }

    /// The tool result from the side request's reply: its text, then the sources (the
    /// results' titles and URLs, the fetched URL, the citations' URLs), as Claude Code
    /// writes a search's. `Err` when the server tool failed and nothing came back.
    pub fn result(&self, content: &[Block]) -> Result<String, String> {
        let mut text = String::new();
        let mut links: Vec<Link> = Vec::new();
        let mut errors: Vec<String> = Vec::new();
        for block in content {
            match block {
                Block::Text(t) => {
                    text.push_str(t.text.as_deref().unwrap_or_default());
                    if let Some(citations) = &t.citations
                        && let Ok(cited) = serde_json::from_str::<Vec<Citation>>(citations.get())
                    {
                        for c in cited {
                            if let Some(url) = c.url {
                                push_link(&mut links, c.title, url);
                            }
                        }
                    }
                }
                Block::ServerToolResult(result) => {
                    let Some(raw) = &result.content else { continue };
                    match serde_json::from_str::<Outcome>(raw.get()) {
                        Ok(Outcome::Hits(hits)) => {
                            for hit in hits {
                                push_link(&mut links, hit.title, hit.url);
                            }
                        }
                        Ok(Outcome::One(one)) => match (one.error_code, one.url) {
                            (Some(code), _) => errors.push(code),
                            (None, Some(url)) => {
                                let title = one.content.and_then(|c| c.title);
                                push_link(&mut links, title, url);
                            }
                            (None, None) => {}
                        },
                        Err(_) => {}
                    }
                }
                _ => {}
            }
        }
        let what = match self.kind {
            ServerToolKind::WebSearch => "Web search",
            ServerToolKind::WebFetch => "Web fetch",
        };
        if text.trim().is_empty() && links.is_empty() {
            return Err(match errors.is_empty() {
                true => format!("{what} returned nothing for {:?}", self.subject),
                false => format!("{what} error: {}", errors.join(", ")),
            });
        }
        let mut out = match self.kind {
            ServerToolKind::WebSearch => {
                format!("Web search results for query: {:?}\n\n", self.subject)
            }
            ServerToolKind::WebFetch => format!("Fetched {}\n\n", self.subject),
        };
        for code in &errors {
            out.push_str(&format!("{what} error: {code}\n"));
        }
        if !text.trim().is_empty() {
            out.push_str(text.trim());
            out.push('\n');
        }
        if links.is_empty() {
            out.push_str("No links found.\n");
        } else {
            let list: Vec<_> = links
                .iter()
                .map(|l| json!({"title": l.title, "url": l.url}))
                .collect();
            out.push_str(&format!("Links: {}\n", serde_json::Value::Array(list)));
        }
        out.push_str(
            "\nREMINDER: You MUST include the sources above in your response to the user using markdown hyperlinks.",
        );
        Ok(out)
    }
}

/// Whether `host` is `domain` or a subdomain of it.
pub fn within(host: &str, domain: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let domain = domain.trim_end_matches('.').to_ascii_lowercase();
    host == domain || host.ends_with(&format!(".{domain}"))
}

struct Link {
    title: String,
    url: String,
}

fn push_link(links: &mut Vec<Link>, title: Option<String>, url: String) {
    if links.iter().any(|l| l.url == url) {
        return;
    }
    let title = title.unwrap_or_else(|| url.clone());
    links.push(Link { title, url });
}

/// A text block's citation: a search result's location, or a fetched document's.
#[derive(Deserialize)]
struct Citation {
    url: Option<String>,
    title: Option<String>,
}

/// A server tool result's `content`: a search's hits, or one object (a fetch's
/// result, or an error with its code).
#[derive(Deserialize)]
#[serde(untagged)]
enum Outcome {
    Hits(Vec<Hit>),
    One(One),
}

#[derive(Deserialize)]
struct Hit {
    title: Option<String>,
    url: String,
}

#[derive(Deserialize)]
struct One {
    error_code: Option<String>,
    url: Option<String>,
    content: Option<Document>,
}

#[derive(Deserialize)]
struct Document {
    title: Option<String>,
}
