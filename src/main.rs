use line_survey::config::Config;
use line_survey::startup::Application;
use line_survey::telemetry;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("configuration error: {error}");
            return std::process::ExitCode::from(2);
        }
    };
    telemetry::init(config.log_format);
    let application = match Application::build(config).await {
        Ok(application) => application,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "start-up failed");
            eprintln!("start-up failed: {error:#}");
            return std::process::ExitCode::from(1);
        }
    };
    match application.run_until_stopped().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = %error, "server stopped with an error");
            std::process::ExitCode::FAILURE
        }
    }
}
