//! Friend-add sources for operators (`GET /admin/sources`, the console's
//! sources page): each source's logins, new friends and unfollows over a range
//! of days (Tokyo, inclusive, the results report's rules), its latest users,
//! and its link as a QR code for posters.

use crate::engine::results::{DayRange, RangeError};
use crate::scenario::sources::Sources;
use crate::store::{SourceCounts, SourceUser, Store, StoreError};
use serde::Serialize;
use std::sync::Arc;

/// Users listed per source on the console.
pub(crate) const RECENT_USERS: u32 = 20;
/// Pixels per QR module: a 33-module code is about 300 px wide with its margin.
const QR_SCALE: usize = 8;
/// The quiet zone around the code, in modules (the standard asks for 4).
const QR_QUIET_ZONE: usize = 4;

/// One row of `GET /admin/sources`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SourceRow {
    pub(crate) id: String,
    pub(crate) label: String,
    pub(crate) link: String,
    pub(crate) tags: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) scenario: Option<String>,
    #[serde(flatten)]
    pub(crate) counts: SourceCounts,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SourcesError {
    #[error(transparent)]
    BadRange(#[from] RangeError),
    #[error("no source with id {0:?}")]
    UnknownSource(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the QR code cannot be drawn: {0}")]
    Qr(String),
}

/// Reads sources' counts and users; never writes.
#[derive(Clone)]
pub(crate) struct SourcesReport {
    store: Store,
    sources: Arc<Sources>,
    /// `PUBLIC_BASE_URL`: links are `{base}/r/{id}`.
    public_base_url: String,
}

impl SourcesReport {
    pub(crate) fn new(store: Store, sources: Arc<Sources>, public_base_url: &str) -> Self {
        Self {
            store,
            sources,
            public_base_url: public_base_url.trim_end_matches('/').to_owned(),
        }
    }

    pub(crate) fn link_of(&self, source: &str) -> String {
        format!("{}/r/{source}", self.public_base_url)
    }

    /// Every source of the file with its counts from `from` to `to`.
    pub(crate) async fn list(&self, from: Option<&str>, to: Option<&str>) -> Result<Vec<SourceRow>, SourcesError> {
        let range = DayRange::parse(from, to)?;
        let (from, to) = range.days();
        let mut rows = Vec::with_capacity(self.sources.len());
        for source in self.sources.all() {
            let counts = self
                .store
                .source_counts(&source.id, from.as_deref(), to.as_deref())
                .await?;
            rows.push(SourceRow {
                id: source.id.clone(),
                label: source.label.clone(),
                link: self.link_of(&source.id),
                tags: source.tags.clone(),
                scenario: source.scenario.as_ref().map(|id| id.as_str().to_owned()),
                counts,
            });
        }
        Ok(rows)
    }

    /// The latest users recorded through `source`, newest first.
    pub(crate) async fn recent_users(&self, source: &str) -> Result<Vec<SourceUser>, SourcesError> {
        if self.sources.get(source).is_none() {
            return Err(SourcesError::UnknownSource(source.to_owned()));
        }
        Ok(self.store.source_users(source, RECENT_USERS).await?)
    }

    /// `source`'s link as a QR code, a grayscale PNG.
    pub(crate) fn qr_png(&self, source: &str) -> Result<Vec<u8>, SourcesError> {
        if self.sources.get(source).is_none() {
            return Err(SourcesError::UnknownSource(source.to_owned()));
        }
        qr_png(&self.link_of(source))
    }
}

/// `text` as a QR code PNG: black modules on white, with the quiet zone.
pub(crate) fn qr_png(text: &str) -> Result<Vec<u8>, SourcesError> {
    let code = qrcode::QrCode::new(text.as_bytes()).map_err(|error| SourcesError::Qr(error.to_string()))?;
    let modules = code.width();
    let colors = code.to_colors();
    let side = (modules + 2 * QR_QUIET_ZONE) * QR_SCALE;
    let mut pixels = vec![255u8; side * side];
    for (index, color) in colors.iter().enumerate() {
        if *color != qrcode::Color::Dark {
            continue;
        }
        let (row, column) = (index / modules, index % modules);
        for dy in 0..QR_SCALE {
            let y = (row + QR_QUIET_ZONE) * QR_SCALE + dy;
            let start = y * side + (column + QR_QUIET_ZONE) * QR_SCALE;
            pixels[start..start + QR_SCALE].fill(0);
        }
    }
    let side = u32::try_from(side).map_err(|_| SourcesError::Qr("the code is too large".into()))?;
    let mut png = Vec::new();
    let mut encoder = png::Encoder::new(&mut png, side, side);
    encoder.set_color(png::ColorType::Grayscale);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder
        .write_header()
        .map_err(|error| SourcesError::Qr(error.to_string()))?;
    writer
        .write_image_data(&pixels)
        .map_err(|error| SourcesError::Qr(error.to_string()))?;
    writer.finish().map_err(|error| SourcesError::Qr(error.to_string()))?;
    Ok(png)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_becomes_a_png_qr_code() {
        let png = qr_png("https://bot.example.jp/r/instagram_dec").expect("drawn");
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let decoder = png::Decoder::new(std::io::Cursor::new(png));
        let reader = decoder.read_info().expect("a readable PNG");
        let info = reader.info();
        assert_eq!(info.width, info.height);
        // Version 3 (29 modules) or so, with the quiet zone, 8 px a module.
        assert_eq!(info.width % 8, 0);
        assert!(info.width >= (21 + 8) * 8, "{}", info.width);
    }
}
