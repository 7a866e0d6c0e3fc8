import { FailedPreconditionError } from '../errors.js';

/**
 * The image itself is unusable: a manifest or config berth cannot read or will not take, layers
 * that do not match the config, a layer entry berth refuses. FAILED_PRECONDITION: the request and
 * the node are fine, and pulling again gets the same answer until the image is fixed.
 */
export class ImageFormatError extends FailedPreconditionError {
  override name = 'ImageFormatError';
}
