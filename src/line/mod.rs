//! The LINE Messaging API protocol, apart from any framework: the webhook
//! signature, the webhook event types, outbound message types and the HTTP client.

pub mod client;
pub(crate) mod login;
pub mod messages;
pub(crate) mod rich_menus;
pub mod signature;
pub mod webhook;
