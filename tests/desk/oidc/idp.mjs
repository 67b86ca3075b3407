// A real OpenID Provider for the desk's single sign-on tests: npm's certified `oidc-provider`, run with Node
// on 127.0.0.1 (tests/desk/idpkit.py starts it). Its people log in with a password on its own page; their
// claims (email, groups) and whether they are disabled can be changed while it runs, through
// POST /_test/accounts (the test's stand-in for an administrator using the IdP's console).
//
//   IDP_PORT=... IDP_CLIENT_SECRET=... IDP_REDIRECTS="http://localhost:8080/signin/oidc/callback" \
//   IDP_ACCOUNTS='{"alice": {"password": "pw", "email": "alice@example.org", "groups": ["grp-finance"]}}' \
//   node idp.mjs
import http from 'node:http';
import { URLSearchParams } from 'node:url';

import Provider from 'oidc-provider';

const port = Number(process.env.IDP_PORT);
const issuer = `http://127.0.0.1:${port}`;
let accounts = JSON.parse(process.env.IDP_ACCOUNTS || '{}');

const provider = new Provider(issuer, {
  clients: [{
    client_id: 'desk',
    client_secret: process.env.IDP_CLIENT_SECRET,
    redirect_uris: (process.env.IDP_REDIRECTS || '').split(' ').filter(Boolean),
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  pkce: { required: () => true },
  scopes: ['openid', 'email', 'groups'],
  claims: { openid: ['sub'], email: ['email', 'email_verified'], groups: ['groups'] },
  conformIdTokenClaims: false, // the ID token carries the scopes' claims (email, groups), not only userinfo
  features: { devInteractions: { enabled: false } },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  cookies: { keys: ['signoff test idp cookie key'] },
  async findAccount(ctx, id) {
    const account = accounts[id];
    if (!account || account.disabled) return undefined; // a disabled person: no token works any more
    return {
      accountId: id,
      async claims() {
        return { sub: id, email: account.email, email_verified: true, groups: account.groups || [] };
      },
    };
  },
});

const page = (uid, error) => `<!doctype html><html><head><title>Test IdP: sign in</title></head><body>
<h1>Example IdP</h1>${error ? `<p id="error">${error}</p>` : ''}
<form method="post" action="/interaction/${uid}/login">
<label>Username <input name="login" autofocus></label>
<label>Password <input name="password" type="password"></label>
<button type="submit">Sign in</button></form></body></html>`;

async function body(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks).toString();
}

const serve = provider.callback();
const server = http.createServer(async (req, res) => {
  try {
    const url = new URL(req.url, issuer);
    const login = url.pathname.match(/^\/interaction\/([^/]+)\/login$/);
    const shown = url.pathname.match(/^\/interaction\/([^/]+)$/);
    if (req.method === 'POST' && url.pathname === '/_test/accounts') {
      accounts = { ...accounts, ...JSON.parse(await body(req)) };
      res.writeHead(204).end();
    } else if (req.method === 'GET' && shown) {
      await provider.interactionDetails(req, res); // (refuses an unknown or expired interaction)
      res.writeHead(200, { 'content-type': 'text/html' }).end(page(shown[1]));
    } else if (req.method === 'POST' && login) {
      const form = new URLSearchParams(await body(req));
      const details = await provider.interactionDetails(req, res);
      const account = accounts[form.get('login')];
      if (!account || account.disabled || account.password !== form.get('password')) {
        res.writeHead(200, { 'content-type': 'text/html' }).end(page(login[1], 'Wrong username or password.'));
        return;
      }
      const grant = new provider.Grant({ accountId: form.get('login'), clientId: details.params.client_id });
      grant.addOIDCScope('openid email groups');
      const grantId = await grant.save();
      await provider.interactionFinished(req, res, {
        login: { accountId: form.get('login') },
        consent: { grantId },
      }, { mergeWithLastSubmission: false });
    } else {
      serve(req, res);
    }
  } catch (err) {
    res.writeHead(400, { 'content-type': 'text/plain' }).end(String(err));
  }
});

server.listen(port, '127.0.0.1', () => process.stdout.write(`ready ${issuer}\n`));
