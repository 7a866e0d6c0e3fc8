/** Shapes shared by the registry modules and their callers. */

/**
 * Credentials for one registry. The fields mirror the CRI AuthConfig; at most one form is used, in
 * this order: registryToken, identityToken, username/password, auth.
 */
export interface RegistryCredentials {
  username?: string;
  password?: string;
  /** base64 of "username:password". */
  auth?: string;
  /** OAuth2 refresh token, exchanged at the token endpoint for access tokens. */
  identityToken?: string;
  /** A bearer token sent as it is. */
  registryToken?: string;
}

/** One place to pull from: a mirror or the registry itself. */
export interface Endpoint {
  /** Base URL; the registry API lives under `${url}/v2/`. E.g. `http://127.0.0.1:5000`. */
  url: string;
  role: 'mirror' | 'origin';
  /** HTTPS without certificate verification (only for this endpoint's host). */
  skipVerify: boolean;
  /** From the hosts file; request credentials replace them on the origin. */
  credentials: RegistryCredentials | null;
}
