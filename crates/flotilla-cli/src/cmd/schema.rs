//! `flotilla schema`: the JSON Schema of the inventory format or of a template.

use crate::{EXIT_OK, EXIT_USAGE};
use flotilla_model::template;

/// Arguments of `flotilla schema`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print the parameter schema of this built-in template instead.
    #[arg(long, value_name = "NAME", conflicts_with = "template_file")]
    pub template: Option<String>,
    /// Print the schema of user template files (templates/NAME.toml) instead.
    #[arg(long)]
    pub template_file: bool,
}

/// Runs the subcommand; returns the exit status.
pub fn run(args: &Args) -> anyhow::Result<u8> {
    let schema = if let Some(name) = &args.template {
        match template::builtin_param_schema(name) {
            Some(s) => s,
            None => {
                let names: Vec<&str> = template::BUILTIN_TEMPLATES
                    .iter()
                    .map(|(n, _)| *n)
                    .collect();
                eprintln!(
                    "error: `{name}` is not a built-in template; built-in templates: {}",
                    names.join(", ")
                );
                return Ok(EXIT_USAGE);
            }
        }
    } else if args.template_file {
        schemars_for_template_file()
    } else {
        flotilla_model::inventory::inventory_schema()
    };
    println!("{}", serde_json::to_string_pretty(&schema)?);
    Ok(EXIT_OK)
}

fn schemars_for_template_file() -> serde_json::Value {
    flotilla_model::template::template_file_schema()
}
