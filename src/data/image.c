/* One PNG or JPEG image decoded from bytes in memory, through Debian's
 * libpng and libjpeg-turbo: what the image-folder reader runs on each file
 * and what fuzz_image drives.
 *
 * Both libraries report errors by longjmp from a handler herd gives them,
 * which writes the library's message into the herd_err, naming the file.
 * libjpeg's warnings (data cut short, a corrupt stream it would paper over
 * with gray) are errors here too: such an image would be a silent wrong
 * answer. libpng's warnings (an odd ancillary chunk) leave the pixels as
 * they are and are ignored.
 */
#include <setjmp.h>
#include <stdio.h> /* before jpeglib.h, which uses FILE and size_t */
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

#include "data/data_parse.h"

/* PNG's deflate stream cannot expand more than about 1032 times: an image
 * whose rows need more bytes than that from the file is refused from its
 * header, before anything that large is allocated. */
enum { PNG_MAX_RATIO = 1100 };

typedef struct png_src {
    const unsigned char *buf;
    size_t len, at;
    const char *name;
    herd_err *err;
    herd_status st;
} png_src;

static void png_read_mem(png_structp p, png_bytep out, size_t n)
{
    png_src *s = png_get_io_ptr(p);
    if (n > s->len - s->at)
        png_error(p, "file cut short");
    memcpy(out, s->buf + s->at, n);
    s->at += n;
}

static void png_fail(png_structp p, png_const_charp msg)
{
    png_src *s = png_get_error_ptr(p);
    s->st = herd_err_set(s->err, HERD_ECORRUPT, "%s: corrupt PNG: %s", s->name, msg);
    png_longjmp(p, 1);
}

static void png_warn(png_structp p, png_const_charp msg)
{
    (void)p, (void)msg;
}

/* Channel-major 8-bit samples from rows of interleaved ones. */
static void to_chw(const unsigned char *hwc, herd__image *img)
{
    size_t hw = img->h * img->w;
    for (size_t j = 0; j < hw; j++)
        for (size_t ch = 0; ch < img->c; ch++)
            img->px[ch * hw + j] = hwc[j * img->c + ch];
}

/* The transforms that leave 8-bit gray or RGB: palettes expanded, gray
 * of 1-4 bits widened, 16-bit samples cut to their high byte, alpha and
 * transparency dropped (libpng's palette expansion turns a tRNS chunk
 * into alpha, which is dropped then too). */
static void png_to_8bit(png_structp p, png_infop info)
{
    int type = png_get_color_type(p, info), depth = png_get_bit_depth(p, info);
    if (type == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(p);
    if (type == PNG_COLOR_TYPE_GRAY && depth < 8)
        png_set_expand_gray_1_2_4_to_8(p);
    if (depth == 16)
        png_set_strip_16(p);
    if ((type & PNG_COLOR_MASK_ALPHA) || png_get_valid(p, info, PNG_INFO_tRNS))
        png_set_strip_alpha(p);
    png_set_interlace_handling(p);
    png_read_update_info(p, info);
}

static herd_status decode_png(const unsigned char *buf, size_t len, const char *name, size_t max_values,
                              herd__image *img, herd_err *err)
{
    png_src src = {buf, len, 0, name, err, HERD_OK};
    png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_fail, png_warn);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    unsigned char *volatile hwc = NULL;
    png_bytep *volatile rows = NULL;
    if (!info) {
        png_destroy_read_struct(p ? &p : NULL, NULL, NULL);
        return herd_err_set(err, HERD_ENOMEM, "%s: out of memory", name);
    }
    if (setjmp(png_jmpbuf(p))) {
        free(hwc), free(rows), free(img->px);
        img->px = NULL;
        png_destroy_read_struct(&p, &info, NULL);
        return src.st < 0 ? src.st : herd_err_set(err, HERD_ECORRUPT, "%s: corrupt PNG", name);
    }
    png_set_read_fn(p, &src, png_read_mem);
    png_read_info(p, info);
    size_t w = png_get_image_width(p, info), h = png_get_image_height(p, info);
    if ((double)h * (double)(png_get_rowbytes(p, info) + 1) > (double)PNG_MAX_RATIO * (double)len)
        png_error(p, "its header claims more pixels than the file can hold");
    png_to_8bit(p, info);
    img->c = png_get_channels(p, info), img->h = h, img->w = w;
    if ((double)img->c * (double)h * (double)w > (double)max_values)
        png_error(p, "larger than herd reads (resize it)");
    if ((img->c != 1 && img->c != 3) || png_get_rowbytes(p, info) != w * img->c)
        png_error(p, "not 8-bit gray or RGB once converted");
    hwc = malloc(h * w * img->c);
    rows = malloc(h * sizeof *rows);
    img->px = malloc(h * w * img->c);
    if (!hwc || !rows || !img->px)
        png_error(p, "out of memory");
    for (size_t y = 0; y < h; y++)
        rows[y] = hwc + y * w * img->c;
    png_read_image(p, rows);
    png_read_end(p, NULL);
    to_chw(hwc, img);
    free(hwc), free(rows);
    png_destroy_read_struct(&p, &info, NULL);
    return HERD_OK;
}

typedef struct jpeg_fail {
    struct jpeg_error_mgr mgr;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jpeg_fail;

static void jpeg_fail_exit(j_common_ptr ci)
{
    jpeg_fail *f = (jpeg_fail *)ci->err;
    ci->err->format_message(ci, f->msg);
    longjmp(f->jb, 1);
}

/* level < 0: a warning about corrupt data, an error here; trace messages (>= 0) are ignored. */
static void jpeg_emit(j_common_ptr ci, int level)
{
    if (level < 0)
        jpeg_fail_exit(ci);
}

static herd_status decode_jpeg(const unsigned char *buf, size_t len, const char *name, size_t max_values,
                               herd__image *img, herd_err *err)
{
    struct jpeg_decompress_struct ci;
    jpeg_fail f;
    unsigned char *volatile hwc = NULL;
    ci.err = jpeg_std_error(&f.mgr);
    f.mgr.error_exit = jpeg_fail_exit;
    f.mgr.emit_message = jpeg_emit;
    if (setjmp(f.jb)) {
        jpeg_destroy_decompress(&ci);
        free(hwc), free(img->px);
        img->px = NULL;
        return herd_err_set(err, HERD_ECORRUPT, "%s: corrupt JPEG: %s", name, f.msg);
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, buf, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    ci.out_color_space = ci.jpeg_color_space == JCS_GRAYSCALE ? JCS_GRAYSCALE : JCS_RGB;
    img->c = ci.out_color_space == JCS_GRAYSCALE ? 1 : 3, img->h = ci.image_height, img->w = ci.image_width;
    if ((double)img->c * (double)img->h * (double)img->w > (double)max_values) {
        snprintf(f.msg, sizeof f.msg, "larger than herd reads (resize it)");
        longjmp(f.jb, 1);
    }
    jpeg_start_decompress(&ci);
    size_t row = (size_t)ci.output_width * (size_t)ci.output_components;
    hwc = malloc(row * ci.output_height);
    img->px = malloc(row * ci.output_height);
    if (!hwc || !img->px) {
        snprintf(f.msg, sizeof f.msg, "out of memory");
        longjmp(f.jb, 1);
    }
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW r = hwc + (size_t)ci.output_scanline * row;
        jpeg_read_scanlines(&ci, &r, 1);
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    to_chw(hwc, img);
    free(hwc);
    return HERD_OK;
}

herd_status herd__image_decode(const unsigned char *buf, size_t len, const char *name, size_t max_values,
                               herd__image *img, herd_err *err)
{
    herd_status st;
    memset(img, 0, sizeof *img);
    if (len >= 8 && !png_sig_cmp(buf, 0, 8))
        st = decode_png(buf, len, name, max_values, img, err);
    else if (len >= 3 && buf[0] == 0xff && buf[1] == 0xd8 && buf[2] == 0xff)
        st = decode_jpeg(buf, len, name, max_values, img, err);
    else
        st = herd_err_set(err, HERD_ECORRUPT, "%s: not a PNG or JPEG file (wrong magic bytes)", name);
    if (st < 0)
        memset(img, 0, sizeof *img);
    return st;
}
