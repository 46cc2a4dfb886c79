//! `flower serve`'s command line. The server itself is `src/serve/`, above the CLI:
//! it shows runs with the CLI's own renderers (`show`, `report`).

use clap::Args;
use flower::settings::Flags;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// 监听的地址:端口(默认 127.0.0.1:7411)。不是本机回环地址时必须给 --token
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,

    /// 每个请求都要带的口令(Authorization: Bearer T,或打开一次 /?token=T 设的 cookie)。没给就看 FLOWER_SERVE_TOKEN
    #[arg(long, value_name = "T")]
    pub token: Option<String>,

    /// 看这个 PostgreSQL 存储(postgres://…)里的全部运行,而不是当前目录下的运行目录。没给就看 FLOWER_STORE
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
}

impl ServeArgs {
    /// Everything these flags say to the settings resolution.
    pub fn flags(&self) -> Flags {
        Flags {
            listen: self.listen.clone(),
            serve_token: self.token.clone(),
            store: self.store.clone(),
            ..Flags::default()
        }
    }
}
