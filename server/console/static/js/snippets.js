// "Copy as": the playground's request as curl, as Python with the openai SDK, and as a Codex config.

function pythonValue(value, indent = 4) {
  return JSON.stringify(value, null, indent).replaceAll(": true", ": True").replaceAll(": false", ": False")
    .replaceAll(": null", ": None");
}

export function snippets(body, origin) {
  const base = `${origin}/v1`;
  const { stream, ...fields } = body;
  const curl = `curl -N ${base}/responses \\\n  -H "Authorization: Bearer $OPENAI_API_KEY" \\\n`
    + `  -H "Content-Type: application/json" \\\n  -d '${JSON.stringify(body).replaceAll("'", "'\\''")}'`;
  const args = Object.entries(fields).map(([name, value]) => `    ${name}=${pythonValue(value).replaceAll("\n", "\n    ")},`);
  const python = `from openai import OpenAI\n\nclient = OpenAI(base_url="${base}")\n`
    + `with client.responses.stream(\n${args.join("\n")}\n) as stream:\n`
    + `    for event in stream:\n        if event.type == "response.output_text.delta":\n`
    + `            print(event.delta, end="", flush=True)\n`;
  const codex = `# $CODEX_HOME/config.toml\nmodel = "${body.model}"\nmodel_provider = "local"\n\n`
    + `[model_providers.local]\nname = "responses-server"\nbase_url = "${base}"\nwire_api = "responses"\n\n`
    + `[model_providers.local.auth]   # the key from a command: Codex then reads the server's model catalog\n`
    + `command = "printenv"\nargs = ["OPENAI_API_KEY"]\n`;
  return { curl, Python: python, "Codex config": codex };
}
